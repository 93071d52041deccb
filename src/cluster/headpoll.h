/* SPDX-License-Identifier: MIT */
/*
 * headpoll: when to ask a node for its head (GET /eth/v1/beacon/headers/head) instead of
 * waiting for its event stream. Event streams are the fast path, but a stream can be slow
 * to start (Lodestar sends its response head only with its first event), down, or up and
 * silent (a buffering proxy). The guarantee beaconmux gives rests on knowing every node's
 * head, so the monitor asks, one request at a time per node:
 *
 *   - at once (once per slot), when no head of the node is known while the chain runs,
 *     and just before genesis (bm_headpoll_pregenesis_ms: its genesis block then counts
 *     from the chain's first instant, and no node is without a head at genesis);
 *   - when its stream is not up (once per slot): as soon as the cluster head moves in the
 *     slot (the node has most likely imported the same block by then), else at the
 *     mid-slot point (slot start + a quarter slot, before the attestation deadline at a
 *     third), so that a block of this slot is seen even when no stream works anywhere;
 *   - when its stream is up but the node has not followed the cluster head a quarter slot
 *     after the head moved (bm_headpoll_behind_ms), once per move: a stream that stopped
 *     delivering (a buffering proxy, a node that hangs) is caught within the slot, and the
 *     request is also the node's probe: a node that does not answer it within
 *     bm_headpoll_probe_ms is not ready for new work until it answers again (the monitor
 *     judges that; see monitor.h).
 *
 * A node at the cluster head (or ahead of it) with its stream up is never polled. Pure: no
 * I/O, no clock reads; times are Unix milliseconds.
 */
#ifndef BM_HEADPOLL_H
#define BM_HEADPOLL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/clock.h"

/** The moments the monitor asks at. */
typedef enum bm_headpoll_moment {
    BM_HEADPOLL_SLOT_START = 0, /* the per-slot round */
    BM_HEADPOLL_MID_SLOT,       /* bm_headpoll_mid_slot_ms of the current slot */
    BM_HEADPOLL_CLUSTER_MOVED,  /* the cluster head just moved */
    BM_HEADPOLL_FOLLOW_UP,      /* bm_headpoll_behind_ms after the cluster head's move */
} bm_headpoll_moment_t;

/** Why a node is due for a poll. */
typedef enum bm_headpoll_reason {
    BM_HEADPOLL_NO = 0,       /* not due */
    BM_HEADPOLL_UNKNOWN_HEAD, /* no head of it is known while the chain runs */
    BM_HEADPOLL_NO_STREAM,    /* its stream is not up (connecting, waiting, backing off) */
    BM_HEADPOLL_BEHIND,       /* its stream is up but it has not followed the cluster head's move */
} bm_headpoll_reason_t;

/** What the monitor knows of one node. */
typedef struct bm_headpoll_node {
    bool stream_up;       /* the main stream is up (its 200 arrived) */
    bool has_head;        /* the tracker knows a head of the node */
    bool at_cluster_head; /* that head is the cluster head, a descendant of it, or a block at a
                             later slot (not behind it) */
    bool poll_in_flight;  /* a head request is running */
    uint64_t polled_slot; /* slot of the last head request (UINT64_MAX: none) */
    uint64_t polled_ms;   /* when the last head request was sent (0: never) */
} bm_headpoll_node_t;

/** The cluster side: the chain's clock and when the cluster head last moved. */
typedef struct bm_headpoll_cluster {
    bm_slot_clock_t clock;
    bool has_head;          /* a cluster head exists */
    uint64_t head_since_ms; /* when it became the cluster head */
} bm_headpoll_cluster_t;

/** Whether (and why) node `n` should be asked for its head now, at `moment`. */
bm_headpoll_reason_t bm_headpoll_due(const bm_headpoll_cluster_t *c, const bm_headpoll_node_t *n,
                                     bm_headpoll_moment_t moment, uint64_t now_ms);

/**
 * How long before genesis a node without a head is asked: 2 s, or half a slot when that is
 * shorter (a head announced more than a slot before its slot starts would be a clock error).
 */
uint64_t bm_headpoll_pregenesis_ms(const bm_slot_clock_t *c);

/** The mid-slot moment of `slot`: its start plus a quarter slot. */
uint64_t bm_headpoll_mid_slot_ms(const bm_slot_clock_t *c, uint64_t slot);

/** When a node with its stream up that has not followed the cluster head's move at
 *  `moved_ms` is asked: a quarter slot after the move. */
uint64_t bm_headpoll_behind_ms(const bm_slot_clock_t *c, uint64_t moved_ms);

/**
 * How long a head request may go unanswered before the node counts as not answering (the
 * probe): a quarter slot, at most 1 s. A node answers a header read in milliseconds even
 * while it imports; one that says nothing this long is stopped, hung or cut off.
 */
uint64_t bm_headpoll_probe_ms(const bm_slot_clock_t *c);

/** "unknown head", "no stream", "behind" (or "no"). */
const char *bm_headpoll_reason_name(bm_headpoll_reason_t r);

#endif /* BM_HEADPOLL_H */
