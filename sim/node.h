/* SPDX-License-Identifier: MIT */
/*
 * node: one simulated beacon node's view of the chain. A node imports each block of the
 * branch it follows at publish time + lag + seeded jitter (on its own, possibly skewed,
 * clock); its head, finality, attestation data, dependent roots and events all follow
 * from what it has imported, exactly like a lagging real node. bs_node_advance(now)
 * performs every import that is due and emits the events; it is a pure function of time,
 * so unit tests drive it without a loop and the runtime calls it from a timer armed at
 * bs_node_next_due_ms() (and before answering a request, so answers are exact to the ms).
 *
 * The node also keeps its bookkeeping: recorded submissions, request counts per route,
 * validator liveness and the attestation data it produced (for aggregate lookups).
 */
#ifndef BS_NODE_H
#define BS_NODE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "chain.h"
#include "spec.h"

/** Event-stream topics (all of the spec's; only some are ever emitted). */
typedef enum {
    BS_TOPIC_HEAD = 0,
    BS_TOPIC_HEAD_V2,
    BS_TOPIC_BLOCK,
    BS_TOPIC_BLOCK_GOSSIP,
    BS_TOPIC_ATTESTATION,
    BS_TOPIC_SINGLE_ATTESTATION,
    BS_TOPIC_VOLUNTARY_EXIT,
    BS_TOPIC_BLS_TO_EXECUTION_CHANGE,
    BS_TOPIC_PROPOSER_SLASHING,
    BS_TOPIC_ATTESTER_SLASHING,
    BS_TOPIC_FINALIZED_CHECKPOINT,
    BS_TOPIC_CHAIN_REORG,
    BS_TOPIC_CONTRIBUTION_AND_PROOF,
    BS_TOPIC_LC_FINALITY_UPDATE,
    BS_TOPIC_LC_OPTIMISTIC_UPDATE,
    BS_TOPIC_PAYLOAD_ATTRIBUTES,
    BS_TOPIC_DATA_COLUMN_SIDECAR,
    BS_TOPIC_EXECUTION_PAYLOAD,
    BS_TOPIC_EXECUTION_PAYLOAD_GOSSIP,
    BS_TOPIC_EXECUTION_PAYLOAD_AVAILABLE,
    BS_TOPIC_EXECUTION_PAYLOAD_BID,
    BS_TOPIC_PAYLOAD_ATTESTATION_MESSAGE,
    BS_TOPIC_FAST_CONFIRMATION,
    BS_TOPIC_PROPOSER_PREFERENCES,
    BS_TOPIC_COUNT
} bs_topic_t;

/** The wire name of a topic. */
const char *bs_topic_name(bs_topic_t t);

/** Parses a topic name (n bytes). Returns 0 or BM_EINVAL. */
int bs_topic_parse(const char *s, size_t n, bs_topic_t *out);

typedef struct bs_node bs_node_t;

/** Receives each event: topic and its data JSON (one line). The callee takes a ref. */
typedef void (*bs_emit_fn)(bs_node_t *n, bs_topic_t topic, bm_buf_t *data, void *ud);

typedef struct bs_checkpoint {
    uint64_t epoch;
    bs_root_t root;
} bs_checkpoint_t;

typedef struct bs_att_data {
    uint64_t slot;
    uint64_t index;
    bs_root_t beacon_block_root;
    bs_checkpoint_t source;
    bs_checkpoint_t target;
} bs_att_data_t;

/** hash_tree_root(AttestationData). */
bs_root_t bs_att_data_root(const bs_att_data_t *d);

/** One recorded submission (a POST the node received). */
typedef struct bs_submission {
    uint64_t seq;
    uint64_t time_ms;
    char *route;  /* route name ("submitPoolAttestationsV2") */
    char *target; /* path and query */
    char *content_type;
    char *consensus_version;
    char *blob_data_included;
    bm_buf_t *body; /* may be NULL */
    int status;     /* what the node answered */
} bs_submission_t;

#define BS_MAX_ROUTES 96
#define BS_RECENT_BLOCKS 128
#define BS_ATT_MEMO 64
#define BS_MAX_SUBMISSIONS 20000
#define BS_ROOT_SEARCH_DEPTH 16384 /* slots searched back for a root lookup */

struct bs_node {
    uint32_t index;
    bs_chain_t *chain;
    bs_behav_t behav;
    uint64_t rng; /* coin flips for error-rate and sse-drop */

    /* the view */
    uint32_t branch;          /* branch followed (0 = canonical) */
    bs_block_id_t head;       /* newest imported block */
    uint64_t head_import_ms;  /* node-clock time of the head's import */
    bool head_full;           /* Gloas: the head's payload is available */
    uint64_t head_payload_ms; /* node-clock time the payload becomes available (or MAX) */
    uint64_t head_gen;        /* bumps on every change of head or payload status */
    uint64_t next_slot;       /* next slot whose block may be imported */
    uint64_t finalized_emitted;
    bs_block_id_t recent[BS_RECENT_BLOCKS]; /* every imported block, newest last */
    uint64_t recent_import_ms[BS_RECENT_BLOCKS];
    uint32_t nrecent;

    /* events */
    bs_emit_fn emit;
    void *emit_ud;
    uint64_t topic_mask; /* topics someone listens to (bit per bs_topic_t) */

    /* bookkeeping */
    uint64_t req_counts[BS_MAX_ROUTES];
    uint64_t req_other;
    bs_submission_t *subs;
    size_t nsubs, capsubs;
    uint64_t sub_seq;
    uint64_t sub_dropped;
    uint64_t *live; /* validators x 4: epoch+1 per ring slot */
    bs_att_data_t att_memo[BS_ATT_MEMO];
    bs_root_t att_memo_root[BS_ATT_MEMO];
    uint32_t att_memo_n;

    /* answer caches, owned by the api module (released with bs_node_dispose) */
    void *cache;
    void (*cache_free)(void *cache);
};

/** Initialises a node at wall time now_ms with behaviour b (imports what is due). */
int bs_node_init(bs_node_t *n, bs_chain_t *chain, uint32_t index, const bs_behav_t *b,
                 uint64_t now_ms);

/** Frees the node's memory (not the struct). */
void bs_node_dispose(bs_node_t *n);

/** The node's clock at wall time now_ms. */
uint64_t bs_node_clock(const bs_node_t *n, uint64_t now_ms);

/** The node's current slot at wall time now_ms (its clock may be skewed). */
uint64_t bs_node_slot(const bs_node_t *n, uint64_t now_ms);

/** Performs the imports and payload arrivals due by wall time now_ms; emits events. */
void bs_node_advance(bs_node_t *n, uint64_t now_ms);

/** Wall time of the next scheduled change (UINT64_MAX: none). */
uint64_t bs_node_next_due_ms(bs_node_t *n);

/** Node-clock import time of block id (publish + lag + jitter). */
uint64_t bs_node_import_ms(bs_node_t *n, bs_block_id_t id);

/**
 * Merges a behaviour change (fields set in `delta`) at wall time now_ms and applies its
 * side effects on the view: fork opens a branch, clearing fork rejoins the canonical
 * chain (chain_reorg), clearing stale/syncing catches up.
 */
void bs_node_set_behav(bs_node_t *n, const bs_behav_t *delta, uint64_t now_ms);

/** Payload delay in ms (behaviour or the seeded default). */
uint64_t bs_node_payload_delay(const bs_node_t *n, uint64_t slot);

/* ---- view queries ---------------------------------------------------------------- */

/** The newest block at or before slot on the node's chain. */
bs_block_id_t bs_node_block_at(bs_node_t *n, uint64_t slot);

/** Checkpoints of the node's head state: justified = epoch - 1, finalized = epoch - 2. */
void bs_node_checkpoints(bs_node_t *n, bs_checkpoint_t *prev_justified,
                         bs_checkpoint_t *cur_justified, bs_checkpoint_t *finalized);

/** The checkpoint (epoch, root of the epoch's boundary block) on the node's chain. */
bs_checkpoint_t bs_node_checkpoint(bs_node_t *n, uint64_t epoch);

/** Attestation data the node gives for `slot` right now. */
void bs_node_attestation_data(bs_node_t *n, uint64_t slot, bs_att_data_t *out);

/** Remembers attestation data (served or received) for aggregate lookups. */
void bs_node_memo_att(bs_node_t *n, const bs_att_data_t *d);

/** Finds memoised attestation data by its hash_tree_root. */
bool bs_node_find_att(bs_node_t *n, const bs_root_t *root, bs_att_data_t *out);

/** Finds a block the node knows by root (recent imports, then its chain up to
 *  BS_ROOT_SEARCH_DEPTH slots back). */
bool bs_node_find_root(bs_node_t *n, const bs_root_t *root, bs_block_id_t *out);

/** True when the block is on the node's chain (an ancestor of its head). */
bool bs_node_canonical(bs_node_t *n, bs_block_id_t id);

/** True when the block's slot is at or before the node's finalized checkpoint. */
bool bs_node_finalized(bs_node_t *n, bs_block_id_t id);

/** Duties dependent root of `epoch` (lookback 1: attester, proposer v2, PTC; 0: v1). */
bs_root_t bs_node_dependent_root(bs_node_t *n, uint64_t epoch, unsigned lookback);

/** Payload status of an imported block: true when the payload is available. */
bool bs_node_payload_full(bs_node_t *n, bs_block_id_t id);

/** Import time (node clock) of a recently imported block; false when unknown. */
bool bs_node_imported_ms(bs_node_t *n, bs_block_id_t id, uint64_t *out);

/** The parent the node builds on when proposing at `slot` (late blocks are re-orged). */
bs_block_id_t bs_node_proposal_parent(bs_node_t *n, uint64_t slot);

/* ---- bookkeeping ----------------------------------------------------------------- */

/** Records a submission; takes a ref on body. Returns its sequence number. */
uint64_t bs_node_record(bs_node_t *n, uint64_t time_ms, const char *route, const char *target,
                        const char *content_type, const char *consensus_version,
                        const char *blob_data_included, bm_buf_t *body, int status);

/** Forgets all recorded submissions. */
void bs_node_clear_submissions(bs_node_t *n);

/** Marks validator v live in epoch. */
void bs_node_mark_live(bs_node_t *n, uint32_t v, uint64_t epoch);

/** True when validator v was marked live in epoch. */
bool bs_node_is_live(const bs_node_t *n, uint32_t v, uint64_t epoch);

#endif /* BS_NODE_H */
