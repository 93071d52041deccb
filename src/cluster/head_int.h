/* SPDX-License-Identifier: MIT */
/*
 * head_int: what the parts of the head tracker share (head.c: notes, node heads, the
 * decision, lifecycle, inputs and reads; head_blocks.c: the block store, the ancestry
 * walks over it and the parent fetches that fill its gaps). Private to those files.
 */
#ifndef BM_HEAD_INT_H
#define BM_HEAD_INT_H

#include "cluster/head.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

enum { P_UNKNOWN = 0, P_ASKING, P_KNOWN };
enum { NO = 0, YES = 1, UNK = 2 };
#define SLOT_UNKNOWN UINT64_MAX
#define MAX_MOVES_PER_EVAL 64 /* moves in one decision; each is strictly "better", see docs */
#define CHASE_LINKS 64        /* missing links fetched per node head chain per decision */

typedef struct blk {
    uint8_t root[32];
    uint8_t parent[32];
    uint64_t slot;
    uint64_t parent_slot; /* the parent's slot once seen (it may be pruned), else SLOT_UNKNOWN */
    uint64_t first_seen_ms;
    uint64_t used_ms; /* last announced or walked: a full table drops the least recent */
    uint64_t asked_at_ms;
    uint64_t asked_mask; /* nodes already asked for this root's header */
    int16_t first_node;  /* first node to announce it as head (any), -1 */
    int16_t first_voter; /* first voter to announce it, -1 */
    int16_t asking;      /* node asked now (pstate P_ASKING), -1 */
    uint8_t pstate;
    bool slot_known;
    bool payload_full;
    bool abandoned; /* the cluster head moved away from it by a reorg */
    bool mark;      /* scratch for pruning */
    bm_buf_t *raw[BM_HEAD_TOPIC_COUNT];
    bm_buf_t *raw_full;
} blk_t;

typedef struct pend {
    uint64_t slot;
    uint8_t root[32];
    bool optimistic;
    bm_payload_status_t payload;
    bm_head_topic_t topic;
    uint64_t received_ms;
    bool polled;     /* a poll's answer (bm_head_event_t.polled): no arrival delay */
    bool delay_done; /* its arrival delay is recorded */
    bm_buf_t *raw;
} pend_t;

typedef struct node {
    bool connected, stale, has_head, may_vote;
    bool observer;   /* a shadow node: followed and judged, never counted (set_node_observer) */
    bool optimistic; /* its latest announcement (believed or pending) was optimistic */
    bool head_optimistic; /* its believed head was announced optimistic */
    bool td_head, td_sync, forked, off, has_pending, has_reorg, has_sync;
    bool on_chain; /* last proven relation: the head, an ancestor or a descendant of it */
    bool agreed;   /* off the chain, and a quorum of voters holds the cluster's side of the
                      split with its head: the off timer may fork it */
    bm_head_relation_t proven_rel; /* the relation last proven (never UNKNOWN) */
    uint64_t slot;
    uint8_t root[32];
    bm_payload_status_t payload;
    bm_head_topic_t topic;
    uint64_t received_ms;
    bool polled; /* its believed head came from a poll */
    pend_t pend;
    uint64_t td_slot, td_early_ms;
    uint64_t sync_slot, sync_at_ms;
    bm_head_relation_t rel;
    uint64_t off_since_ms;
    uint8_t off_root[32];
    uint8_t reorg_from[32], reorg_to[32];
    bm_buf_t *reorg_raw;
    int32_t delays[BM_HEAD_DELAYS]; /* ring, newest at (delay_pos - 1) */
    uint32_t n_delays, delay_pos;
    uint64_t firsts;
    uint32_t inflight;
    uint64_t budget_slot; /* the slot fetch_count counts in */
    uint32_t fetch_count; /* header requests asked of it in budget_slot */
} node_t;

enum { N_HEAD, N_PAYLOAD, N_NODE, N_FETCH, N_TICK };

typedef struct note {
    int kind;
    union {
        bm_head_change_t change;
        bm_head_payload_t payload;
        struct {
            uint8_t root[32];
            uint64_t slot;
            size_t node;
        } fetch;
        size_t node;
        uint64_t now;
    } u;
} note_t;

struct bm_head {
    size_t n;
    node_t *nodes;
    bm_head_opts_t o;
    bm_slot_clock_t clock;
    bool clock_known;
    uint32_t quorum;
    uint64_t now;
    uint64_t pruned_at_slot;
    uint64_t seed;

    bool has_head;
    bool agreed; /* a quorum of voters is on the cluster chain (forked may be judged) */
    uint8_t head[32];
    uint64_t head_slot;
    uint64_t head_since_ms;
    uint64_t origin_slot; /* the first cluster head's slot */

    blk_t *blk;
    uint32_t nblk, cap;
    int32_t *idx; /* 0 empty, else blk index + 1 */
    uint32_t imask;

    struct {
        bm_head_listener_t l;
        void *ud;
    } lis[BM_HEAD_MAX_LISTENERS];
    size_t nlis;
    bm_head_fetch_fn fetch;
    void *fetch_ud;

    note_t *q;
    size_t qn, qcap, qhead;
    int depth;
    bool draining;
    uint64_t noted; /* nodes with an undelivered N_NODE */

    bm_head_stats_t stats;
};

/* ---- small helpers ------------------------------------------------------------------ */

static inline bool eq(const uint8_t a[32], const uint8_t b[32])
{
    return memcmp(a, b, 32) == 0;
}

/* Saturating: a node's absurd slot must not wrap around into the past. */
static inline uint64_t slot_start(const bm_head_t *t, uint64_t slot)
{
    if (slot > (UINT64_MAX - t->clock.genesis_ms) / t->clock.slot_ms)
        return UINT64_MAX;
    return bm_slot_start_ms(&t->clock, slot);
}

/* More than a slot ahead of `at_ms`? (saturating) */
static inline bool ahead(const bm_head_t *t, uint64_t slot, uint64_t at_ms)
{
    uint64_t start = slot_start(t, slot);
    return start > at_ms && start - at_ms > t->clock.slot_ms;
}

static inline uint64_t keep_slots(const bm_head_t *t)
{
    return (uint64_t)t->o.keep_epochs * t->clock.slots_per_epoch;
}

/* ---- node predicates ---------------------------------------------------------------- */

/* May this node's announcements count (first announcer, raw data, payload evidence)? */
static inline bool trusted(const node_t *v)
{
    return v->may_vote && !v->observer && !v->optimistic && !v->head_optimistic && !v->td_head &&
           !v->td_sync && !v->forked;
}

/* Does this node's head count now? */
static inline bool voter(const node_t *v)
{
    return trusted(v) && v->has_head && !v->stale && v->connected;
}

/*
 * May we ask this node for headers? Forked nodes too: their ancestry proves rejoining.
 * Bounded in flight and per slot, so that no node (spamming roots, or answering with
 * ever new parents) can make the tracker ask without end.
 */
static inline bool askable(const bm_head_t *t, const node_t *v)
{
    uint64_t slot = t->clock_known ? bm_slot_at(&t->clock, t->now) : 0;
    uint32_t used = v->budget_slot == slot ? v->fetch_count : 0;
    return v->connected && v->may_vote && !v->optimistic && !v->td_head && !v->td_sync &&
           v->inflight < t->o.max_fetch_per_node && used < t->o.max_fetch_per_slot;
}

/* ---- across the parts ----------------------------------------------------------------------- */

/* head_blocks.c: the block store */
int32_t bm_hd_blk_find(const bm_head_t *t, const uint8_t r[32]);
void bm_hd_blk_release(bm_head_t *t, blk_t *b);
void bm_hd_prune(bm_head_t *t, bool force);
int32_t bm_hd_blk_get(bm_head_t *t, const uint8_t root[32], uint64_t slot, bool create,
                      uint64_t seen_ms);

/* head_blocks.c: ancestry */
int bm_hd_is_anc_ex(const bm_head_t *t, const uint8_t a[32], uint64_t a_slot, const uint8_t d[32],
                    bool *crossed, bool *pending);
int bm_hd_is_anc(const bm_head_t *t, const uint8_t a[32], uint64_t a_slot, const uint8_t d[32],
                 bool *crossed);
uint64_t bm_hd_root_slot(const bm_head_t *t, const uint8_t root[32], uint64_t fallback);
bm_head_relation_t bm_hd_relation_ex(const bm_head_t *t, const uint8_t r[32], uint64_t r_slot,
                                     bool *crossed, bool *pending);
bm_head_relation_t bm_hd_relation(const bm_head_t *t, const uint8_t r[32], uint64_t r_slot,
                                  bool *crossed);
bool bm_hd_common_ancestor(const bm_head_t *t, const uint8_t x[32], const uint8_t y[32],
                           uint8_t out[32], uint64_t *out_slot);

/* head_blocks.c: parents */
void bm_hd_want(bm_head_t *t, const uint8_t root_in[32], uint64_t slot, size_t pref, bool retry);
void bm_hd_request_parents(bm_head_t *t);

/* head.c: notes */
void bm_hd_push(bm_head_t *t, const note_t *n);

#endif /* BM_HEAD_INT_H */
