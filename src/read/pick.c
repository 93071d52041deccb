/* SPDX-License-Identifier: MIT */
/*
 * pick: sets, tiers, then the strategy (see pick.h). Groups are found by walking the
 * (archive, set, priority) keys in increasing order.
 */
#include "read/pick.h"

#include "base/defaults.h"

int bm_pick_set_of(bm_node_state_t s)
{
    switch (s) {
    case BM_NODE_READY:
        return BM_PICK_READY;
    case BM_NODE_UNKNOWN:
    case BM_NODE_UNREACHABLE:
        return BM_PICK_MAYBE_BACK;
    case BM_NODE_WRONG_NETWORK:
        return BM_PICK_NEVER;
    default:
        return BM_PICK_ANSWERING;
    }
}

/* The group key of a node: archive first (when asked), then set, then tier. */
static uint64_t key_of(const bm_pick_node_t *nd, const bm_pick_opts_t *o)
{
    uint64_t arch = o->archive_first && !nd->archive ? 1 : 0;
    return arch << 40 | (uint64_t)nd->set << 32 | nd->priority;
}

static bool eligible(const bm_pick_node_t *nd, const bm_pick_opts_t *o)
{
    return nd->available && nd->set != BM_PICK_NEVER && (!o->archive_only || nd->archive);
}

size_t bm_pick_order(const bm_pick_node_t *nodes, size_t n, const bm_pick_opts_t *o, size_t want,
                     bm_rng_t *rng, size_t *order)
{
    size_t got = 0;
    bool have_prev = false;
    uint64_t prev = 0;
    if (n > BM_MAX_NODES)
        n = BM_MAX_NODES;
    while (got < want) {
        /* the next group: the smallest key above the previous one */
        bool found = false;
        uint64_t key = 0;
        for (size_t i = 0; i < n; i++) {
            if (!eligible(&nodes[i], o))
                continue;
            uint64_t k = key_of(&nodes[i], o);
            if ((!have_prev || k > prev) && (!found || k < key)) {
                key = k;
                found = true;
            }
        }
        if (!found)
            break;
        bm_balance_item_t items[BM_MAX_NODES];
        size_t idx[BM_MAX_NODES], sub[BM_MAX_NODES], m = 0;
        for (size_t i = 0; i < n; i++) {
            if (eligible(&nodes[i], o) && key_of(&nodes[i], o) == key) {
                items[m] = nodes[i].item;
                idx[m++] = i;
            }
        }
        bm_balance_order(o->strategy, items, m, rng, sub);
        for (size_t j = 0; j < m && got < want; j++)
            order[got++] = idx[sub[j]];
        prev = key;
        have_prev = true;
    }
    return got;
}
