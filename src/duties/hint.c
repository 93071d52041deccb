/* SPDX-License-Identifier: MIT */
/*
 * hint: the expected head and the hold deadline of a duty read (see hint.h). Pure reads
 * of the head tracker and the chain information; the only state is the configuration.
 */
#include "duties/hint.h"

#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/defaults.h"

struct bm_hint {
    bm_hint_opts_t opts;
    const bm_head_t *head;
    const bm_chain_info_t *chain;
};

void bm_hint_opts_default(bm_hint_opts_t *o)
{
    for (int i = 0; i < BM_HINT_DUTY_COUNT; i++) {
        o->hold[i].hold_floor_ms = BM_DEFAULT_DUTIES_HOLD_FLOOR_MS;
        o->hold[i].max_hold_ms = BM_DEFAULT_DUTIES_MAX_HOLD_MS;
    }
}

bm_hint_t *bm_hint_new(const bm_hint_opts_t *opts)
{
    bm_hint_t *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    if (opts)
        h->opts = *opts;
    else
        bm_hint_opts_default(&h->opts);
    /* a floor above the cap would make the formula hold longer than maxHold */
    for (int i = 0; i < BM_HINT_DUTY_COUNT; i++)
        if (h->opts.hold[i].hold_floor_ms > h->opts.hold[i].max_hold_ms)
            h->opts.hold[i].hold_floor_ms = h->opts.hold[i].max_hold_ms;
    return h;
}

void bm_hint_free(bm_hint_t *h)
{
    free(h);
}

void bm_hint_set_head(bm_hint_t *h, const bm_head_t *head)
{
    h->head = head;
}

void bm_hint_set_chain(bm_hint_t *h, const bm_chain_info_t *chain)
{
    h->chain = chain;
}

const bm_head_t *bm_hint_head(const bm_hint_t *h)
{
    return h->head;
}

const bm_chain_info_t *bm_hint_chain(const bm_hint_t *h)
{
    if (!h->chain || !h->chain->known || !bm_slot_clock_valid(&h->chain->clock))
        return NULL;
    return h->chain;
}

bm_hint_hold_t bm_hint_get_hold(const bm_hint_t *h, bm_hint_duty_t duty)
{
    if ((int)duty < 0 || duty >= BM_HINT_DUTY_COUNT)
        return (bm_hint_hold_t){BM_DEFAULT_DUTIES_HOLD_FLOOR_MS, BM_DEFAULT_DUTIES_MAX_HOLD_MS};
    return h->opts.hold[duty];
}

bool bm_hint_expected(const bm_hint_t *h, uint64_t slot, bm_expected_t *out)
{
    memset(out, 0, sizeof *out);
    bm_head_info_t hi;
    if (!h->head || !bm_head_cluster(h->head, &hi))
        return false;
    if (hi.slot <= slot) {
        out->known = true;
        memcpy(out->root, hi.root, 32);
        out->slot_known = true;
        out->slot = hi.slot;
        out->is_cluster_head = true;
        out->payload_full = bm_head_payload_full(h->head);
        out->parent_known = hi.parent_known;
        if (hi.parent_known)
            memcpy(out->parent, hi.parent, 32);
        out->first_seen_ms = hi.first_seen_ms;
        return true;
    }
    /* a past slot: the cluster chain's block at it */
    if (bm_head_root_at_slot(h->head, slot, out->root) != 0)
        return false;
    out->known = true;
    out->slot = slot;
    uint8_t before[32];
    /* the block is the one of `slot` itself when the chain's block one slot earlier
     * differs; the genesis block (slot 0) is its own */
    if (slot == 0 ||
        (bm_head_root_at_slot(h->head, slot - 1, before) == 0 && memcmp(before, out->root, 32)))
        out->slot_known = true;
    return true;
}

/* The chain's due time of each hint duty. */
static bm_due_t due_of(bm_hint_duty_t duty)
{
    switch (duty) {
    case BM_HINT_ATTESTATION_DATA:
        return BM_DUE_ATTESTATION;
    case BM_HINT_HEAD_ROOT:
        return BM_DUE_SYNC_MESSAGE;
    case BM_HINT_PAYLOAD_ATTESTATION:
        return BM_DUE_PAYLOAD_ATTESTATION;
    case BM_HINT_AGGREGATE:
        return BM_DUE_AGGREGATE;
    case BM_HINT_SYNC_CONTRIBUTION:
        return BM_DUE_CONTRIBUTION;
    default:
        return BM_DUE_ATTESTATION;
    }
}

uint64_t bm_hint_due_ms(const bm_hint_t *h, bm_hint_duty_t duty, uint64_t slot)
{
    const bm_chain_info_t *c = bm_hint_chain(h);
    if (!c)
        return 0;
    return bm_chain_due_ms(c, slot, due_of(duty));
}

uint64_t bm_hint_deadline_at(uint64_t now_ms, uint64_t due_ms, uint32_t hold_floor_ms,
                             uint32_t max_hold_ms)
{
    uint64_t floor = now_ms + hold_floor_ms;
    uint64_t cap = now_ms + max_hold_ms;
    uint64_t d = due_ms > floor ? due_ms : floor;
    return d < cap ? d : cap;
}

uint64_t bm_hint_deadline(const bm_hint_t *h, bm_hint_duty_t duty, uint64_t slot, uint64_t now_ms)
{
    bm_hint_hold_t hold = bm_hint_get_hold(h, duty);
    return bm_hint_deadline_at(now_ms, bm_hint_due_ms(h, duty, slot), hold.hold_floor_ms,
                               hold.max_hold_ms);
}

uint64_t bm_hint_end_at(uint64_t now_ms, uint64_t due_ms, uint32_t max_hold_ms)
{
    uint64_t cap = now_ms + max_hold_ms;
    return due_ms > cap ? due_ms : cap;
}

uint64_t bm_hint_end(const bm_hint_t *h, bm_hint_duty_t duty, uint64_t slot, uint64_t now_ms)
{
    return bm_hint_end_at(now_ms, bm_hint_due_ms(h, duty, slot),
                          bm_hint_get_hold(h, duty).max_hold_ms);
}

bool bm_hint_arrived_late(const bm_hint_t *h, const bm_expected_t *e)
{
    const bm_chain_info_t *c = bm_hint_chain(h);
    if (!c || !e->known || !e->slot_known || !e->is_cluster_head || e->first_seen_ms == 0)
        return false;
    return e->first_seen_ms > bm_chain_due_ms(c, e->slot, BM_DUE_ATTESTATION);
}

bool bm_hint_head_moving(const bm_hint_t *h, uint64_t slot)
{
    bm_head_info_t hi;
    if (!h->head || !bm_head_cluster(h->head, &hi))
        return false;
    size_t n = bm_head_node_count(h->head);
    for (size_t i = 0; i < n; i++) {
        bm_head_node_view_t v;
        if (bm_head_node_view(h->head, i, &v) != 0)
            continue;
        if (v.voter && !v.forked && !v.time_discrepancy && v.has_head && v.slot > hi.slot &&
            v.slot <= slot && v.relation == BM_HEAD_REL_UNKNOWN && v.fetch_in_flight > 0)
            return true;
    }
    return false;
}

bool bm_hint_node_behind(const bm_hint_t *h, size_t node)
{
    bm_head_node_view_t v;
    if (!h->head || node >= bm_head_node_count(h->head) ||
        bm_head_node_view(h->head, node, &v) != 0 || !v.has_head)
        return false;
    return v.relation == BM_HEAD_REL_ANCESTOR;
}

bool bm_hint_fork(const bm_hint_t *h, uint64_t slot, bm_fork_t *out)
{
    const bm_chain_info_t *c = bm_hint_chain(h);
    *out = BM_FORK_PHASE0;
    if (!c)
        return false;
    *out = bm_chain_fork_at_slot(c, slot);
    return true;
}

bool bm_hint_slot_at(const bm_hint_t *h, uint64_t now_ms, uint64_t *slot)
{
    const bm_chain_info_t *c = bm_hint_chain(h);
    if (!c)
        return false;
    *slot = bm_slot_at(&c->clock, now_ms);
    return true;
}

size_t bm_hint_candidates(const bm_pool_t *pool, bm_node_t **out, size_t cap)
{
    return bm_pool_candidates(pool, BM_POOL_PREFER_READY, true, out, cap);
}
