/* SPDX-License-Identifier: MIT */
/*
 * head: the cluster head tracker. Every node's head events feed it; it decides the one
 * head the cluster believes (the "expected head" duty reads are accepted against), and per
 * node how that node's view compares with it. It is pure logic: no I/O, no loop, no clock
 * reads. Time comes in as `now_ms` (Unix milliseconds) with every input, node identity is
 * the node's index (the pool's configuration order), and decisions go out through
 * listeners. The module that runs the per-node event streams feeds it; health, the
 * cluster event stream and the status page read it.
 *
 * The rules (docs/head-tracker.md says why):
 * - Only voters move the cluster head: a node votes with a believed, non-optimistic head
 *   from a live stream while it is neither forked nor time-discrepant, and while health
 *   lets it (bm_head_set_node_vote). Support for a root = voters whose head is that root
 *   or a known descendant of it.
 * - Extension: a voter's head that descends from the cluster head through known parent
 *   links (normally its direct child) moves it at once, from one node alone. Parents are
 *   learned from block headers the tracker asks for (bm_head_set_fetch): one request per
 *   root, de-duplicated while in flight, bounded per node in flight and per slot.
 * - Anything else (first head, competing block, older parent, unknown ancestry) needs
 *   `quorum` supporters and must beat the current head: more supporters, or as many at a
 *   later slot. Among several candidates: most supporters, then first seen. A known (or
 *   possible) ancestor of the cluster head is never a candidate: lagging nodes cannot pull
 *   the head back; only `quorum` voters that reported a chain_reorg to an ancestor, and
 *   hold it, move the head back to it. Quorum decisions wait while a voter's deciding
 *   header is in flight.
 * - A head for slot s is believed from slot_start(s) - 500 ms; earlier ones are pending.
 *   A head more than a slot ahead of the clock (or a syncing head_slot that is) makes the
 *   node time-discrepant. A head off the cluster chain (proven by known parent links) for
 *   more than one slot makes the node forked, while a quorum of voters is on that chain;
 *   unknown ancestry proves nothing.
 * - Block knowledge is bounded (max_blocks entries, keep_epochs of age).
 *
 * Re-entrancy: listeners and the fetch function are called after an input has been fully
 * processed, never in the middle of a decision; they may call any input function (e.g.
 * answer a fetch at once, or change the quorum). Notifications are delivered in order.
 * Listeners must not free the tracker.
 */
#ifndef BM_HEAD_H
#define BM_HEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/defaults.h"

#define BM_HEAD_DELAYS 8         /* recent arrival delays kept per node */
#define BM_HEAD_DISPARITY_MS 500 /* MAXIMUM_GOSSIP_CLOCK_DISPARITY */
#define BM_HEAD_RAW_MAX 16384u   /* larger raw event data is not kept */
#define BM_HEAD_MAX_LISTENERS 8

/** Gloas payload status of a head (head_v2 `payload_status`). */
typedef enum bm_payload_status {
    BM_PAYLOAD_UNKNOWN = 0, /* `head` topic, or before Gloas */
    BM_PAYLOAD_EMPTY,
    BM_PAYLOAD_FULL,
} bm_payload_status_t;

/** Which topic a head event came from. */
typedef enum bm_head_topic {
    BM_HEAD_TOPIC_HEAD = 0,
    BM_HEAD_TOPIC_HEAD_V2,
    BM_HEAD_TOPIC_COUNT
} bm_head_topic_t;

/** How the cluster head moved. */
typedef enum bm_head_move {
    BM_HEAD_MOVE_FIRST = 0, /* there was no cluster head before */
    BM_HEAD_MOVE_EXTEND,    /* the old head is a known ancestor of the new one */
    BM_HEAD_MOVE_REORG,     /* the old head is not: depth known when the common ancestor is */
    BM_HEAD_MOVE_JUMP,      /* the relation to the old head is unknown (missing parents) */
} bm_head_move_t;

/** A node's head compared with the cluster head. */
typedef enum bm_head_relation {
    BM_HEAD_REL_NONE = 0,   /* no cluster head, or no head for the node */
    BM_HEAD_REL_EQUAL,      /* the cluster head itself */
    BM_HEAD_REL_ANCESTOR,   /* behind, on the cluster chain */
    BM_HEAD_REL_DESCENDANT, /* ahead, on the cluster chain */
    BM_HEAD_REL_OFF,        /* off the cluster chain (proven by known parent links) */
    BM_HEAD_REL_UNKNOWN,    /* parent links missing: nothing proven */
} bm_head_relation_t;

typedef struct bm_head_opts {
    uint32_t quorum;              /* headQuorum until bm_head_set_quorum (>= 1; default 1) */
    uint32_t max_blocks;          /* cap on block knowledge entries (default 2048; min 4n+64) */
    uint32_t keep_epochs;         /* blocks older than this below the clock are dropped (4) */
    uint32_t chase_epochs;        /* cluster chain ancestry fetched this far back (2) */
    uint32_t max_fetch_per_node;  /* header requests in flight per node (default 4) */
    uint32_t max_fetch_per_slot;  /* header requests per node per slot (default 64) */
    uint32_t fetch_timeout_slots; /* an unanswered request counts as failed after (2) */
} bm_head_opts_t;

/** A head / head_v2 event from one node. */
typedef struct bm_head_event {
    uint64_t slot;
    uint8_t root[32]; /* `block` */
    bool optimistic;  /* `execution_optimistic` */
    bm_payload_status_t payload;
    bm_head_topic_t topic;
    bool polled;     /* the answer to GET headers/head, not an event: it tells what the node
                        had when asked, not when it got it (no arrival time) */
    const char *raw; /* the event's data (JSON text), copied; may be NULL */
    size_t raw_len;
} bm_head_event_t;

/** A chain_reorg event from one node. */
typedef struct bm_head_reorg_event {
    uint64_t slot;
    uint64_t depth;
    uint8_t old_head[32]; /* `old_head_block` */
    uint8_t new_head[32]; /* `new_head_block` */
    bool optimistic;
    const char *raw; /* copied; may be NULL */
    size_t raw_len;
} bm_head_reorg_event_t;

/**
 * A move of the cluster head. The buffers are borrowed for the duration of the callback
 * (take a reference with bm_buf_ref to keep one).
 */
typedef struct bm_head_change {
    bm_head_move_t move;
    bool by_quorum; /* moved by quorum (or quorum chain_reorg), not by extension */
    bool has_old;   /* false for BM_HEAD_MOVE_FIRST */
    uint8_t old_root[32];
    uint64_t old_slot;
    uint8_t root[32];
    uint64_t slot;
    bool parent_known;
    uint8_t parent[32];
    bool depth_known;     /* REORG: the common ancestor is known */
    uint64_t depth;       /* old_slot - ancestor_slot */
    uint8_t ancestor[32]; /* the common ancestor (REORG with depth_known) */
    uint64_t ancestor_slot;
    int node;          /* the announcing node (first voter to announce the root); -1: none */
    bool payload_full; /* the new head's payload is already known full (Gloas) */
    bm_buf_t *raw[BM_HEAD_TOPIC_COUNT]; /* first voter's data per topic, or NULL */
    bm_buf_t *raw_full;                 /* first voter's head_v2 data saying "full", or NULL */
    bm_buf_t *raw_reorg;                /* a voter's chain_reorg data matching this move, or NULL */
    uint64_t at_ms;
} bm_head_change_t;

/** The cluster head's payload became known full (send the second head_v2). */
typedef struct bm_head_payload {
    uint8_t root[32];
    uint64_t slot;
    int node;      /* the node that said so */
    bm_buf_t *raw; /* its head_v2 data (payload_status "full"), or NULL when the evidence
                      was execution_payload_available; borrowed */
    uint64_t at_ms;
} bm_head_payload_t;

/** Listener; any member may be NULL. */
typedef struct bm_head_listener {
    void (*head)(const bm_head_change_t *c, void *ud);
    void (*payload)(const bm_head_payload_t *p, void *ud);
    void (*node)(size_t node, void *ud);     /* a node's view (flags, head, relation) changed */
    void (*tick)(uint64_t now_ms, void *ud); /* bm_head_tick ran: time-based rules re-judged */
} bm_head_listener_t;

/**
 * Asks for the header of `root` (GET /eth/v1/beacon/headers/{root}) from `node`, which
 * holds it. `slot` is the root's slot when known, else UINT64_MAX. Every call must be
 * answered exactly once, by bm_head_on_parent or bm_head_on_parent_failed (at once from
 * inside the call is fine); an answer missing for fetch_timeout_slots counts as failed.
 */
typedef void (*bm_head_fetch_fn)(const uint8_t root[32], uint64_t slot, size_t node, void *ud);

/** The cluster head, for readers. */
typedef struct bm_head_info {
    uint8_t root[32];
    uint64_t slot;
    bool parent_known;
    uint8_t parent[32];
    bool payload_full;
    int first_node; /* first voter that announced it; -1 unknown */
    uint64_t first_seen_ms;
    uint64_t since_ms;    /* when it became the cluster head */
    uint64_t origin_slot; /* slot of the first cluster head since the clock was set */
} bm_head_info_t;

/** One node's view, for health, the status page and the cluster stream. */
typedef struct bm_head_node_view {
    bool connected; /* its event stream is up (a head event implies it) */
    bool has_head;  /* a believed head exists (possibly stale) */
    bool stale;     /* the stream dropped since that head: it no longer votes */
    uint64_t slot;
    uint8_t root[32];
    bool parent_known;
    uint8_t parent[32];
    bm_payload_status_t payload;
    bm_head_topic_t topic;
    bool optimistic; /* its latest head announcement was optimistic */
    uint64_t received_ms;
    bool polled;  /* that head came from a poll (and its stream has not announced it since):
                     received_ms is when beaconmux asked */
    bool pending; /* a head announced too early, waiting for its time */
    uint64_t pending_slot;
    uint8_t pending_root[32];
    bool time_discrepancy; /* td_head || td_sync */
    bool td_head;          /* a head more than a slot ahead of the clock */
    bool td_sync;          /* a syncing head_slot more than a slot ahead of the clock */
    uint64_t td_slot;      /* the offending slot */
    uint64_t td_early_ms;  /* how far ahead of that slot's start it was */
    bool forked;           /* off the cluster chain for more than a slot */
    bm_head_relation_t relation;
    uint64_t off_since_ms;             /* when proven off the cluster chain (0: not off) */
    bool may_vote;                     /* health allows it */
    bool observer;                     /* a shadow node (bm_head_set_node_observer) */
    bool voter;                        /* it counts now */
    int32_t delays_ms[BM_HEAD_DELAYS]; /* arrival after slot start, most recent first */
    uint32_t n_delays;
    uint64_t firsts; /* cluster heads this node announced first */
    uint32_t fetch_in_flight;
} bm_head_node_view_t;

typedef struct bm_head_stats {
    uint64_t moves[4]; /* per bm_head_move_t */
    uint64_t fetches;  /* header requests asked */
    uint64_t fetch_failures;
    uint64_t fetch_timeouts;
    uint64_t bad_answers;    /* headers contradicting what is known */
    uint64_t ignored_future; /* heads more than a slot ahead of the clock */
    uint64_t pruned;         /* block entries dropped */
} bm_head_stats_t;

typedef struct bm_head bm_head_t;

/** Fills `o` with the defaults. */
void bm_head_opts_default(bm_head_opts_t *o);

/** A tracker for `n_nodes` nodes (1..BM_MAX_NODES). NULL on bad size or no memory. */
bm_head_t *bm_head_new(size_t n_nodes, const bm_head_opts_t *opts);

/** Frees the tracker and every buffer it holds. Never from inside a callback. */
void bm_head_free(bm_head_t *t);

/** Adds a listener (at most BM_HEAD_MAX_LISTENERS); `l` is copied. 0 or BM_ENOMEM. */
int bm_head_listen(bm_head_t *t, const bm_head_listener_t *l, void *ud);

/** Removes every listener registered with `ud`. */
void bm_head_unlisten(bm_head_t *t, void *ud);

/** Sets the header fetcher (one; NULL: parents are never asked for). */
void bm_head_set_fetch(bm_head_t *t, bm_head_fetch_fn fn, void *ud);

/**
 * Sets the chain's clock. Until a valid clock is set nothing is believed (heads wait as
 * pending). A clock different from the previous one (another chain) forgets all head
 * knowledge. Returns 0 or BM_EINVAL for an invalid clock.
 */
int bm_head_set_clock(bm_head_t *t, const bm_slot_clock_t *c, uint64_t now_ms);

/** Sets headQuorum (values below 1 count as 1) and re-decides. */
void bm_head_set_quorum(bm_head_t *t, uint32_t quorum);

/** Current headQuorum. */
uint32_t bm_head_quorum(const bm_head_t *t);

/**
 * Health's verdict on whether a node may vote at all (right network, not syncing, not
 * optimistic by its own syncing answer...). Default true. Re-decides when it changes.
 */
void bm_head_set_node_vote(bm_head_t *t, size_t node, bool may_vote);

/**
 * Marks `node` an observer (a shadow node, duties/shadow.h), or not. An observer is followed
 * like any node (its head, lag, relation to the cluster chain, forked and time-discrepant
 * verdicts, arrival delays; it may be asked for headers, so its own branch can be proven)
 * but counts for nothing: it never votes, never supports a candidate, is never a block's
 * first announcer, and its raw event data and payload evidence are never used. Default
 * false. Re-decides when it changes.
 */
void bm_head_set_node_observer(bm_head_t *t, size_t node, bool observer);

/* ---- inputs (0, or BM_EINVAL for a bad node index or argument) -------------------- */

/** A head or head_v2 event from `node`, received at `now_ms`. */
int bm_head_on_head(bm_head_t *t, size_t node, const bm_head_event_t *ev, uint64_t now_ms);

/** A block event: `root` is at `slot` (knowledge only). */
int bm_head_on_block(bm_head_t *t, size_t node, uint64_t slot, const uint8_t root[32],
                     uint64_t now_ms);

/** A header answer: `root` is at `slot` with parent `parent`, as `node` says. */
int bm_head_on_parent(bm_head_t *t, size_t node, const uint8_t root[32], uint64_t slot,
                      const uint8_t parent[32], uint64_t now_ms);

/** A header request for `root` to `node` failed. */
int bm_head_on_parent_failed(bm_head_t *t, size_t node, const uint8_t root[32], uint64_t now_ms);

/** A chain_reorg event from `node`. */
int bm_head_on_reorg(bm_head_t *t, size_t node, const bm_head_reorg_event_t *ev, uint64_t now_ms);

/** An execution_payload_available event (Gloas): `root`'s payload is available. */
int bm_head_on_payload_available(bm_head_t *t, size_t node, uint64_t slot, const uint8_t root[32],
                                 uint64_t now_ms);

/** The head_slot of `node`'s /eth/v1/node/syncing answer (time-discrepancy check only). */
int bm_head_on_sync_head(bm_head_t *t, size_t node, uint64_t head_slot, uint64_t now_ms);

/** `node`'s event stream (re)connected. */
int bm_head_on_connect(bm_head_t *t, size_t node, uint64_t now_ms);

/** `node`'s event stream dropped: its head is stale (kept for lag, no longer a vote). */
int bm_head_on_disconnect(bm_head_t *t, size_t node, uint64_t now_ms);

/**
 * Re-judges the time-based rules (pending heads, forked timers, request timeouts, age
 * pruning). Call at every slot start and at bm_head_next_wakeup_ms.
 */
void bm_head_tick(bm_head_t *t, uint64_t now_ms);

/**
 * The earliest time a time-based rule changes something (0: none pending). Only times at
 * which bm_head_tick has something to do: once ticked at or after it, a wake-up is gone
 * or later (a caller re-arming a timer from it never spins).
 */
uint64_t bm_head_next_wakeup_ms(const bm_head_t *t);

/* ---- reads ------------------------------------------------------------------------- */

/** Number of nodes. */
size_t bm_head_node_count(const bm_head_t *t);

/** The cluster head into `out`; false (and `out` untouched) when there is none yet. */
bool bm_head_cluster(const bm_head_t *t, bm_head_info_t *out);

/**
 * Whether the chain runs, on the tracker's clock at its latest input time (`now_ms` of the
 * last input or tick): true once a clock is set and that time is at or after genesis, with
 * the slot it is in (`slot` may be NULL); false before. From then on every node should have
 * a head: nodes hold at least the genesis block.
 */
bool bm_head_chain_slot(const bm_head_t *t, uint64_t *slot);

/** True when the cluster head's payload is known full (Gloas). */
bool bm_head_payload_full(const bm_head_t *t);

/** `node`'s view into `out`. 0 or BM_EINVAL. */
int bm_head_node_view(const bm_head_t *t, size_t node, bm_head_node_view_t *out);

/**
 * The cluster chain's block root at `slot` (the latest block at or before it, as
 * get_block_root_at_slot): the head itself when `slot` is at or after the head's slot.
 * Returns 0, BM_EUNAVAIL without a cluster head, BM_ENOTFOUND when parent links do not
 * reach that far.
 */
int bm_head_root_at_slot(const bm_head_t *t, uint64_t slot, uint8_t out[32]);

/**
 * How block `a` relates to block `b` by the tracker's parent links: EQUAL, ANCESTOR (`a`
 * is a strict ancestor of `b`), DESCENDANT, OFF (proven on another branch, or two blocks
 * at one slot), UNKNOWN (a block or a link between them is not known).
 */
bm_head_relation_t bm_head_relation_of(const bm_head_t *t, const uint8_t a[32],
                                       const uint8_t b[32]);

/** Block knowledge entries held now. */
size_t bm_head_block_count(const bm_head_t *t);

/** Counters. */
const bm_head_stats_t *bm_head_stats(const bm_head_t *t);

/** "first", "extend", "reorg", "jump". */
const char *bm_head_move_name(bm_head_move_t m);

/** "unknown", "empty", "full". */
const char *bm_payload_status_name(bm_payload_status_t s);

/** Parses "empty" / "full"; anything else is BM_PAYLOAD_UNKNOWN. */
bm_payload_status_t bm_payload_status_parse(const char *s, size_t len);

/** "none", "equal", "ancestor", "descendant", "off", "unknown". */
const char *bm_head_relation_name(bm_head_relation_t r);

#endif /* BM_HEAD_H */
