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
    if (n->poll_in_flight || n->polled_slot == slot)
        return BM_HEADPOLL_NO; /* once per slot; a hung node is asked once, not every slot */
    if (!n->has_head)
        return BM_HEADPOLL_UNKNOWN_HEAD;
    if (!n->stream_up) {
        /* The move is the best moment (the block that moved the cluster is most likely in
         * the node by then); without a move, the mid-slot point still sees this slot's
         * block in time for the attestation deadline. */
        if (moment == BM_HEADPOLL_CLUSTER_MOVED ||
            now_ms >= bm_headpoll_mid_slot_ms(&c->clock, slot))
            return BM_HEADPOLL_NO_STREAM;
        return BM_HEADPOLL_NO;
    }
    /* An up stream is judged per slot, at the slot start: did it deliver a head during the
     * previous slot, in which the cluster head moved past the node? Judging at other moments
     * would race with a working stream whose heads come exactly a slot apart. */
    if (moment != BM_HEADPOLL_SLOT_START || !c->has_head || n->at_cluster_head || slot == 0)
        return BM_HEADPOLL_NO;
    uint64_t prev_start = bm_slot_start_ms(&c->clock, slot - 1);
    if (n->last_stream_head_ms >= prev_start || n->stream_up_ms >= prev_start)
        return BM_HEADPOLL_NO; /* it spoke in the previous slot, or was not up for all of it */
    if (c->head_since_ms <= n->last_stream_head_ms)
        return BM_HEADPOLL_NO; /* the cluster has not moved since its last head */
    return BM_HEADPOLL_SILENT;
}

const char *bm_headpoll_reason_name(bm_headpoll_reason_t r)
{
    switch (r) {
    case BM_HEADPOLL_UNKNOWN_HEAD:
        return "unknown head";
    case BM_HEADPOLL_NO_STREAM:
        return "no stream";
    case BM_HEADPOLL_SILENT:
        return "silent stream";
    case BM_HEADPOLL_NO:
        break;
    }
    return "no";
}
