/* SPDX-License-Identifier: MIT */
/*
 * headpoll: the decision of when the monitor asks a node for its head. See headpoll.h for
 * the rules; this file is only their arithmetic.
 */
#include "cluster/headpoll.h"

uint64_t bm_headpoll_pregenesis_ms(const bm_slot_clock_t *c)
{
    uint64_t half = c->slot_ms / 2;
    return half < 2000 ? half : 2000;
}

uint64_t bm_headpoll_mid_slot_ms(const bm_slot_clock_t *c, uint64_t slot)
{
    return bm_slot_start_ms(c, slot) + c->slot_ms / 4;
}

uint64_t bm_headpoll_behind_ms(const bm_slot_clock_t *c, uint64_t moved_ms)
{
    return moved_ms + c->slot_ms / 4;
}

uint64_t bm_headpoll_probe_ms(const bm_slot_clock_t *c)
{
    uint64_t q = c->slot_ms / 4;
    return q < 1000 ? q : 1000;
}

bm_headpoll_reason_t bm_headpoll_due(const bm_headpoll_cluster_t *c, const bm_headpoll_node_t *n,
                                     bm_headpoll_moment_t moment, uint64_t now_ms)
{
    if (!bm_slot_clock_valid(&c->clock))
        return BM_HEADPOLL_NO;
    if (now_ms < c->clock.genesis_ms) {
        /* Before genesis there is no head to miss, but a node's genesis block asked for just
         * before it (believed from half a second before genesis) makes the node count from
         * the chain's first instant instead of being headless until the first poll. */
        bool soon = now_ms + bm_headpoll_pregenesis_ms(&c->clock) >= c->clock.genesis_ms;
        return soon && !n->has_head && !n->poll_in_flight ? BM_HEADPOLL_UNKNOWN_HEAD
                                                          : BM_HEADPOLL_NO;
    }
    uint64_t slot = bm_slot_at(&c->clock, now_ms);
    if (n->poll_in_flight)
        return BM_HEADPOLL_NO; /* a hung node is asked once, not again and again */
    if (!n->has_head)
        return n->polled_slot == slot ? BM_HEADPOLL_NO : BM_HEADPOLL_UNKNOWN_HEAD;
    if (n->stream_up) {
        /* Its stream is the fast path. A quarter slot after the cluster head moved past it
         * (healthy nodes import within that, and one that is only slow answers the request
         * at once), it is asked once per move: a stream that stopped delivering is caught
         * within the slot, and a node that does not answer at all is found out. */
        /* asked after the move: not again for it (a request sent in the millisecond of the
         * move may have left before it, and proves nothing about the new head) */
        if (!c->has_head || n->at_cluster_head ||
            now_ms < bm_headpoll_behind_ms(&c->clock, c->head_since_ms) ||
            n->polled_ms > c->head_since_ms)
            return BM_HEADPOLL_NO;
        return BM_HEADPOLL_BEHIND;
    }
    if (n->polled_slot == slot)
        return BM_HEADPOLL_NO; /* once per slot */
    /* The move is the best moment (the block that moved the cluster is most likely in
     * the node by then); without a move, the mid-slot point still sees this slot's
     * block in time for the attestation deadline. */
    if (moment == BM_HEADPOLL_CLUSTER_MOVED || now_ms >= bm_headpoll_mid_slot_ms(&c->clock, slot))
        return BM_HEADPOLL_NO_STREAM;
    return BM_HEADPOLL_NO;
}

const char *bm_headpoll_reason_name(bm_headpoll_reason_t r)
{
    switch (r) {
    case BM_HEADPOLL_UNKNOWN_HEAD:
        return "unknown head";
    case BM_HEADPOLL_NO_STREAM:
        return "no stream";
    case BM_HEADPOLL_BEHIND:
        return "behind";
    case BM_HEADPOLL_NO:
        break;
    }
    return "no";
}
