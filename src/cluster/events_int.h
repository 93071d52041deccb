/* SPDX-License-Identifier: MIT */
/*
 * events_int: what the parts of the cluster event stream share (events.c: the module,
 * its subscribers and the node events; events_topics.c: topic names, the query string,
 * serialisation and the dedup window; events_head.c: the cluster head's events;
 * events_extra.c: the extra per-node streams). Private to those files.
 */
#ifndef BM_EVENTS_INT_H
#define BM_EVENTS_INT_H

#include "cluster/events.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "base/clock.h"
#include "base/json.h"
#include "base/list.h"
#include "base/log.h"
#include "cluster/nodestream.h"

/* Decided by the tracker: never forwarded from a node. */
#define TRACKER_TOPICS                                                                             \
    (BM_TOPIC_BIT(BM_TOPIC_HEAD) | BM_TOPIC_BIT(BM_TOPIC_HEAD_V2) |                                \
     BM_TOPIC_BIT(BM_TOPIC_CHAIN_REORG))

/*
 * Carried by every node's main stream (the monitor's), besides the tracker topics. The
 * monitor adds execution_payload_available only near Gloas, but no node emits it before.
 */
#define MAIN_TOPICS                                                                                \
    (TRACKER_TOPICS | BM_TOPIC_BIT(BM_TOPIC_BLOCK) | BM_TOPIC_BIT(BM_TOPIC_FINALIZED_CHECKPOINT) | \
     BM_TOPIC_BIT(BM_TOPIC_EXECUTION_PAYLOAD_AVAILABLE))

/*
 * Topics that state what a node's chain looks like (imported blocks, finality, payloads,
 * fork choice): taken only from nodes the tracker trusts (not forked, optimistic or
 * time-discrepant). Gossip topics only say that a message passed validation and come
 * from any node.
 */
#define CHAIN_TOPICS                                                                               \
    (BM_TOPIC_BIT(BM_TOPIC_BLOCK) | BM_TOPIC_BIT(BM_TOPIC_FINALIZED_CHECKPOINT) |                  \
     BM_TOPIC_BIT(BM_TOPIC_EXECUTION_PAYLOAD) |                                                    \
     BM_TOPIC_BIT(BM_TOPIC_EXECUTION_PAYLOAD_AVAILABLE) |                                          \
     BM_TOPIC_BIT(BM_TOPIC_PAYLOAD_ATTRIBUTES) | BM_TOPIC_BIT(BM_TOPIC_FAST_CONFIRMATION) |        \
     BM_TOPIC_BIT(BM_TOPIC_LIGHT_CLIENT_FINALITY_UPDATE) |                                         \
     BM_TOPIC_BIT(BM_TOPIC_LIGHT_CLIENT_OPTIMISTIC_UPDATE))

/* ---- the dedup window ---------------------------------------------------------------------
 * A ring of the last `cap` keys in arrival order and an open-addressing set over them
 * (linear probing, deletion by backward shift), so that lookup, insert and eviction of
 * the oldest are O(1) and memory is fixed. A key is a 64-bit keyed hash of topic and
 * canonical data; 0 marks an empty slot (a hash of 0 is stored as 1).
 */
typedef struct dedup {
    uint64_t *ring;
    uint32_t cap, n, pos;
    uint64_t *tab;
    uint32_t tmask;
} dedup_t;

/* ---- the module ------------------------------------------------------------------------------ */

typedef struct sub {
    bm_link_t link; /* on the stream's subs */
    bm_events_t *ev;
    bm_req_t *req;
    bm_topic_mask_t mask;
    uint64_t id;
    size_t unchecked; /* bytes written since the kernel's queue was last looked at */
} sub_t;

/* What a head event says, from either topic's form. */
typedef struct headf {
    uint64_t slot;
    uint8_t root[32];
    char block[BM_ROOT_HEX_LEN + 1];
    char state[BM_ROOT_HEX_LEN + 1];
    bool epoch_transition;
    bool has_deps;
    char dep_cur_epoch[BM_ROOT_HEX_LEN + 1];  /* head_v2 current_epoch_dependent_root =
                                                 head previous_duty_dependent_root */
    char dep_next_epoch[BM_ROOT_HEX_LEN + 1]; /* head_v2 next_epoch_dependent_root =
                                                 head current_duty_dependent_root */
    char version[33];                         /* head_v2 only ("" otherwise) */
    bm_payload_status_t payload;              /* head_v2 only */
} headf_t;

/* A cluster head whose data no node gave yet: emitted when a trusted node's head arrives. */
typedef struct pend_head {
    bool valid;
    bm_head_change_t c; /* buffers: only raw_reorg is held */
} pend_head_t;

#define HOLD_MAX 64   /* events held for coalescing at most */
#define STATE_RING 32 /* recent cluster heads' state roots, for chain_reorg's old_head_state */

/* Probe states of one topic on one node. */
enum { PS_UNKNOWN = 0, PS_PROBING, PS_OK, PS_UNSUPPORTED };

typedef struct xnode xnode_t;

typedef struct probe {
    xnode_t *x;
    bm_topic_t t;
    bm_nodestream_t *s;
    uint64_t hto; /* header timeouts seen so far */
} probe_t;

typedef struct xstream {
    bm_nodestream_t *s;
    bm_topic_mask_t mask;
    uint64_t hto; /* header timeouts seen so far */
} xstream_t;

/* One node's extra stream: `cur` serves, `next` replaces it once up (make before break). */
struct xnode {
    bm_events_t *ev;
    size_t idx;
    uint8_t ps[BM_TOPIC_COUNT];
    probe_t probe[BM_TOPIC_COUNT];
    bm_topic_mask_t logged; /* unsupported topics already logged */
    xstream_t cur, next;
    bool main_up;
    uint64_t last_reprobe_ms;
};

struct bm_events {
    bm_clock_t *clock;
    bm_events_opts_t o;
    bm_events_stats_t st;
    uint8_t hkey[16]; /* per-process key of the dedup hash */

    bm_link_t subs; /* the subscribers (sub_t) */
    uint64_t next_id;
    uint32_t cnt[BM_TOPIC_COUNT];         /* subscribers per topic */
    uint64_t unwanted_ms[BM_TOPIC_COUNT]; /* when cnt fell to 0 (linger) */
    bm_buf_t *keepalive_buf;
    size_t check_step; /* see sub_write */
    struct {
        bm_topic_t t;
        bm_buf_t *b;
    } held[HOLD_MAX]; /* see emit */
    uint32_t nheld;
    bm_timer_t *hold;
    bm_timer_t *keepalive;
    bm_timer_t *reconcile;
    int open_handles;
    bool shutting_down;
    bool freed;

    bm_head_t *head;
    bm_upstream_t *up;
    bm_pool_t *pool;
    bm_events_tap_fn tap; /* sees every event the stream emits (the response cache) */
    void *tap_ud;
    const bm_discovery_t *disc; /* the chain, read when needed */
    bool chain_known;
    bm_chain_info_t chain; /* set directly (tests), when no discovery is attached */

    dedup_t dd;

    /* the cluster head as emitted */
    bool cur_valid;
    headf_t cur;
    bool cur_full_sent;
    struct {
        uint8_t root[32];
        char state[BM_ROOT_HEX_LEN + 1];
    } states[STATE_RING];
    uint32_t states_pos;
    pend_head_t pend;

    xnode_t *x;
    size_t nx;

    bm_log_limit_t lim_drop;
    bm_log_limit_t lim_bad;
};

/* ---- across the parts ----------------------------------------------------------------------- */

/* events_topics.c: the dedup window */
int bm_ev_dedup_init(dedup_t *d, uint32_t cap);
void bm_ev_dedup_dispose(dedup_t *d);
bool bm_ev_dedup_has(const dedup_t *d, uint64_t h);
void bm_ev_dedup_add(dedup_t *d, uint64_t h);

/* events.c */
void bm_ev_emit(bm_events_t *ev, bm_topic_t t, const char *data, size_t len);
bool bm_ev_node_trusted(const bm_events_t *ev, size_t node);

/* events_head.c */
const bm_chain_info_t *bm_ev_chain_of(const bm_events_t *ev);
void bm_ev_pend_clear(bm_events_t *ev);
void bm_ev_pend_try(bm_events_t *ev, bool v2, struct json_object *o, const char *data, size_t len);

/* events_extra.c */
void bm_ev_schedule_reconcile(bm_events_t *ev, uint64_t ms);
void bm_ev_stop_streams(bm_events_t *ev);
void bm_ev_on_reconcile(bm_timer_t *t, void *ud);

#endif /* BM_EVENTS_INT_H */
