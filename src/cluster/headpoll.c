/* SPDX-License-Identifier: MIT */
/*
 * headpoll: the decision of when the monitor asks a node for its head. See headpoll.h for
 * the rules; this file is only their arithmetic.
 */
#include "cluster/headpoll.h"

uint64_t bm_headpoll_mid_slot_ms(const bm_slot_clock_t *c, uint64_t slot)
{
    return bm_slot_start_ms(c, slot) + c->slot_ms / 4;
}

bm_headpoll_reason_t bm_headpoll_due(const bm_headpoll_cluster_t *c, const bm_headpoll_node_t *n,
                                     bm_headpoll_moment_t moment, uint64_t now_ms)
{
    if (!bm_slot_clock_valid(&c->clock) || now_ms < c->clock.genesis_ms)
        return BM_HEADPOLL_NO; /* before genesis there is no head to miss */
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
    if (!c->has_head || n->at_cluster_head)
        return BM_HEADPOLL_NO;
    uint64_t heard =
        n->last_stream_head_ms > n->stream_up_ms ? n->last_stream_head_ms : n->stream_up_ms;
    if (now_ms < heard || now_ms - heard < c->clock.slot_ms)
        return BM_HEADPOLL_NO; /* it spoke within the last slot: its next head is coming */
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
