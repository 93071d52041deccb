/* SPDX-License-Identifier: MIT */
/*
 * produce: block production, GET /eth/v3/validator/blocks/{slot} (phase0..fulu) and
 * GET /eth/v4/validator/blocks/{slot} (gloas), and the legacy forms validator clients still
 * in service ask (removed from the spec after Electra): GET /eth/v2/validator/blocks/{slot}
 * (a full block) and GET /eth/v1/validator/blinded_blocks/{slot} (a blinded one), all
 * raced over the nodes so that a proposer is never handed a block built on a stale head
 * while another node had the fresh one. Every form follows the same rules.
 *
 * Rules (docs/duties.md says why):
 *   - accept a block whose parent_root is the expected head (src/duties/hint.h: the cluster
 *     head before `slot`), or that head's parent when the head arrived after its own
 *     slot's attestation due time and is the previous slot's block (honest proposers
 *     re-org such late blocks: get_proposer_head);
 *   - parent_root is read from the JSON body (data.parent_root, or data.block.parent_root
 *     for BlockContents) or from the SSZ offsets (src/base/ssz.h) by Eth-Consensus-Version and
 *     Eth-Execution-Payload-Blinded / -Included;
 *   - deadline: slot start + proposalDeadline. Before it only an accepted block is
 *     served (a node on a stale parent is re-asked); after it the best accepted block,
 *     else the first 2xx. A node that failed is asked again until the end, the later of
 *     the deadline and now + maxHold (a request after the deadline still gets maxHold);
 *     then the most specific error, a 4xx or a 503 naming each node's failure;
 *   - selection "first": the first accepted block. "best-value": the highest
 *     consensus + execution value (256-bit, from the Eth-Consensus-Block-Value and
 *     Eth-Execution-Payload-Value headers or the JSON fields) among the accepted blocks
 *     within bestValueGrace of the first, honouring the request's builder_boost_factor
 *     between local and builder (blinded) blocks;
 *   - a slot over by more than the clock disparity (500 ms after its end), or one whose
 *     start no clock can hold (2^64 - 1), is refused with 400 at once: no node is asked;
 *   - the node whose block was served is remembered per slot (with the block's
 *     state_root) for a few epochs: blinded blocks and stateful Gloas envelope reads must
 *     go to it first (src/duties/broadcast.c).
 */
#ifndef BM_PRODUCE_H
#define BM_PRODUCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/hdrs.h"
#include "base/u256.h"
#include "cluster/pool.h"
#include "duties/hint.h"
#include "duties/race.h"
#include "duties/serve.h"
#include "duties/shadow.h"
#include "http/router.h"

/* Slots remembered by bm_produce_node_for_slot (4 mainnet epochs). */
#define BM_PRODUCE_MEMORY_SLOTS 128

/** How a block proposal is chosen among the nodes' acceptable blocks (duties.blockSelection). */
typedef enum bm_produce_selection {
    BM_PRODUCE_FIRST = 0,  /* "first": the first accepted block */
    BM_PRODUCE_BEST_VALUE, /* "best-value": the most valuable accepted block within the grace */
} bm_produce_selection_t;

/* The default of duties.blockSelection. It lives beside its type rather than in
 * base/defaults.h with the other defaults, which cannot name this layer's types. */
#define BM_PRODUCE_DEFAULT_SELECTION BM_PRODUCE_FIRST

typedef struct bm_produce_opts {
    uint32_t proposal_deadline_ms; /* after slot start (default duties.proposalDeadline) */
    bm_produce_selection_t selection;
    uint32_t best_value_grace_ms; /* default duties.bestValueGrace */
    uint32_t repoll_interval_ms;  /* re-asking a node whose block was on a stale parent
                                     (default 250: a block production is not cheap) */
    uint32_t connect_timeout_ms;  /* default timeouts.connect */
    uint32_t max_hold_ms;         /* a production asked after its deadline waits at most this
                                     long (default duties.maxHold) */
} bm_produce_opts_t;

/** Fills `o` with the defaults above. */
void bm_produce_opts_default(bm_produce_opts_t *o);

typedef struct bm_produce bm_produce_t;

/** A block production policy over `race` and `pool`, judged by `hint`, reading the time of
 *  `clock` (the engine's; all borrowed, they must outlive it). `opts` is copied (NULL:
 *  defaults). NULL on allocation failure. */
bm_produce_t *bm_produce_new(bm_clock_t *clock, bm_race_engine_t *race, bm_pool_t *pool,
                             bm_hint_t *hint, const bm_produce_opts_t *opts);

/** Mirrors every race of the policy to the shadow nodes (borrowed; NULL: none). */
void bm_produce_set_shadow(bm_produce_t *p, bm_shadow_t *shadow);

/** Frees the policy. Free the race engine first when shutting down: its races judge with
 *  this policy (their contexts are the races' own and go with them). */
void bm_produce_free(bm_produce_t *p);

/**
 * Asks for a record of every block production served (duties/serve.h), with the block's
 * parent_root as its root; `witness` as in bm_attest_on_served. NULL `fn`: none.
 */
void bm_produce_on_served(bm_produce_t *p, bm_served_fn fn, void *ud, bool witness);

/** Registers the four production routes (GET v3 and v4 blocks, legacy v2 blocks and v1
 *  blinded_blocks). */
int bm_produce_register(bm_produce_t *p, bm_router_t *r);

/**
 * The node that produced the block served for `slot` (its pool index), remembered for
 * BM_PRODUCE_MEMORY_SLOTS slots; -1 when unknown. When `state_root` is not NULL it
 * receives that block's state_root and *has_state_root (may be NULL) says whether it was
 * read (for blinded blocks, and any other block whose body could be read). When a slot
 * was produced several times, the latest served production counts.
 */
int bm_produce_node_for_slot(const bm_produce_t *p, uint64_t slot, uint8_t state_root[32],
                             bool *has_state_root);

/** A production served for `slot` by the node at pool index `node`; `state_root` (32 bytes,
 *  borrowed for the call) or NULL when the block's could not be read; `time_ms` the wall
 *  time it was served (or learnt) at, which decides between two records of one slot. */
typedef void (*bm_produce_remember_fn)(void *ud, uint64_t slot, int node, const uint8_t *state_root,
                                       uint64_t time_ms);

/** Calls `fn` each time a served production is remembered (shared state gives it to the
 *  other instances). NULL stops it. */
void bm_produce_on_remember(bm_produce_t *p, bm_produce_remember_fn fn, void *ud);

/** Remembers that another instance served `slot` from the node at pool index `node` (with
 *  `state_root`, may be NULL) at wall time `time_ms`, as if it had been served here; the
 *  listener does not hear it. A slot older than the one the memory holds in its place is
 *  ignored, and so is a record of the same slot older than the one held (newer wins). */
void bm_produce_learn(bm_produce_t *p, uint64_t slot, int node, const uint8_t *state_root,
                      uint64_t time_ms);

/** Calls `fn` for every slot the memory holds (oldest ring position first), with the time
 *  it was served or learnt at: shared state writes them back after a Redis outage. */
void bm_produce_each(const bm_produce_t *p, bm_produce_remember_fn fn, void *ud);

/** Productions served, productions served on an accepted parent, fallbacks (stale or
 *  unreadable), failures (no 2xx at all), and requests refused without asking a node (a
 *  slot over, or one that cannot be). */
typedef struct bm_produce_stats {
    uint64_t served;
    uint64_t accepted;
    uint64_t fallback;
    uint64_t failed;
    uint64_t refused;
} bm_produce_stats_t;

/** Counters since the start. */
bm_produce_stats_t bm_produce_stats(const bm_produce_t *p);

/* ---- the rules, pure (exported for tests) ------------------------------------------ */

/** What the policy reads from a produced block. */
typedef struct bm_produce_block {
    uint64_t slot;
    uint8_t parent_root[32];
    bool has_state_root;
    uint8_t state_root[32];
    bool blinded;        /* Eth-Execution-Payload-Blinded (V3): a builder's block */
    bool has_value;      /* at least one of the two values was given */
    bm_u256_t consensus; /* consensus block value, Wei (0 when absent) */
    bm_u256_t execution; /* execution payload value, Wei (0 when absent) */
} bm_produce_block_t;

/** Which production request an answer is for. */
typedef enum bm_produce_form {
    BM_PRODUCE_FORM_V3 = 0,     /* v3: full or blinded, as Eth-Execution-Payload-Blinded says */
    BM_PRODUCE_FORM_V4,         /* v4 (gloas): Eth-Execution-Payload-Included */
    BM_PRODUCE_FORM_V2,         /* legacy v2 blocks: a full block (BlockContents from Deneb) */
    BM_PRODUCE_FORM_BLINDED_V1, /* legacy v1 blinded_blocks: a BlindedBeaconBlock */
} bm_produce_form_t;

/**
 * Reads a produce answer of `form`. The body is parsed by its Content-Type:
 * application/octet-stream as SSZ (layout by Eth-Consensus-Version and, for v3 and v4,
 * Eth-Execution-Payload-Blinded / -Included), anything else as JSON. Values come from the
 * headers, else from the JSON fields. Returns 0, or BM_EINVAL when the body or a value
 * cannot be read.
 */
int bm_produce_parse_form(const bm_hdrs_t *headers, const bm_buf_t *body, bm_produce_form_t form,
                          bm_produce_block_t *out);

/** bm_produce_parse_form for v3 or (`v4`) v4. */
int bm_produce_parse(const bm_hdrs_t *headers, const bm_buf_t *body, bool v4,
                     bm_produce_block_t *out);

/**
 * Whether a block on `parent` is acceptable for the expected head `e`: parent == the
 * head, or (when `head_late`) parent == the head's parent. Every parent is acceptable
 * when no expected head is known.
 */
bool bm_produce_parent_ok(const bm_expected_t *e, bool head_late, const uint8_t parent[32]);

/**
 * Compares two blocks by value for best-value selection: < 0, 0 or > 0 as `a` is worth
 * less than, as much as or more than `b`. Blocks of the same kind compare their
 * consensus + execution values; between a local and a builder (blinded) block the
 * builder's execution value counts as boost * (value / 100) (the builder_boost_factor rule
 * of src/base/u256.h), and with boost 0 every local block beats every builder block.
 */
int bm_produce_value_cmp(const bm_produce_block_t *a, const bm_produce_block_t *b, uint64_t boost);

/**
 * The builder_boost_factor of a query string (without '?'): 100 when absent or not a
 * decimal uint64 (the node refuses the request then anyway).
 */
uint64_t bm_produce_boost(const char *query, size_t len);

#endif /* BM_PRODUCE_H */
