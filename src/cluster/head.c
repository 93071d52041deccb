/* SPDX-License-Identifier: MIT */
/*
 * head: the cluster head tracker. Three parts:
 * - block knowledge: a bounded table root -> slot, parent, who announced it first, its
 *   raw event data, payload evidence; open addressing over a dense array that is
 *   compacted (and the index rebuilt) when it is pruned, so entries are referred to by
 *   root, never by pointer across a prune;
 * - per-node views: believed head, pending head, flags (optimistic, time-discrepancy,
 *   forked), relation to the cluster head, recent arrival delays;
 * - the decision (evaluate): re-judge every node's relation, then move the cluster head
 *   while a rule allows it (quorum chain_reorg back to an ancestor, quorum move, single
 *   node extension), then ask for the parents the rules still miss.
 * Inputs run to completion; their consequences are queued as notes and delivered when
 * the outermost input returns, so listeners always see a consistent tracker and may call
 * back in.
 *
 * The block knowledge, its ancestry walks and the parent fetches live in head_blocks.c;
 * what both files share is in head_int.h.
 */
#include "cluster/head.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/json.h"
#include "base/log.h"
#include "cluster/head_int.h"

/* ---- notes -------------------------------------------------------------------------- */

void bm_hd_push(bm_head_t *t, const note_t *n)
{
    if (t->qn == t->qcap && t->qhead > 0) {
        /* Delivered notes at the front make room: a long re-entrant chain of inputs
         * (answers given from inside the fetch callback) must not grow the queue. */
        memmove(t->q, t->q + t->qhead, (t->qn - t->qhead) * sizeof *t->q);
        t->qn -= t->qhead;
        t->qhead = 0;
    }
    note_t *q = bm_grow(t->q, t->qn, &t->qcap, sizeof *q, 16);
    if (!q) {
        bm_log(BM_LOG_ERROR, "head: out of memory, a notification is lost");
        return;
    }
    t->q = q;
    t->q[t->qn++] = *n;
}

static void note_node(bm_head_t *t, size_t v)
{
    if (t->noted & (1ull << v))
        return;
    t->noted |= 1ull << v;
    note_t n = {.kind = N_NODE};
    n.u.node = v;
    bm_hd_push(t, &n);
}

static void release(note_t *n)
{
    if (n->kind == N_HEAD) {
        for (int k = 0; k < BM_HEAD_TOPIC_COUNT; k++)
            bm_buf_unref(n->u.change.raw[k]);
        bm_buf_unref(n->u.change.raw_full);
        bm_buf_unref(n->u.change.raw_reorg);
    } else if (n->kind == N_PAYLOAD) {
        bm_buf_unref(n->u.payload.raw);
    }
}

static void deliver(bm_head_t *t, const note_t *n)
{
    if (n->kind == N_FETCH) {
        if (t->fetch)
            t->fetch(n->u.fetch.root, n->u.fetch.slot, n->u.fetch.node, t->fetch_ud);
        return;
    }
    if (n->kind == N_NODE)
        t->noted &= ~(1ull << n->u.node);
    for (size_t i = 0; i < t->nlis; i++) {
        const bm_head_listener_t *l = &t->lis[i].l;
        void *ud = t->lis[i].ud;
        switch (n->kind) {
        case N_HEAD:
            if (l->head)
                l->head(&n->u.change, ud);
            break;
        case N_PAYLOAD:
            if (l->payload)
                l->payload(&n->u.payload, ud);
            break;
        case N_NODE:
            if (l->node)
                l->node(n->u.node, ud);
            break;
        case N_TICK:
            if (l->tick)
                l->tick(n->u.now, ud);
            break;
        }
    }
}

static void drain(bm_head_t *t)
{
    t->draining = true;
    while (t->qhead < t->qn) {
        note_t n = t->q[t->qhead++];
        deliver(t, &n);
        release(&n);
    }
    t->qhead = t->qn = 0;
    t->draining = false;
}

/* ---- payload ------------------------------------------------------------------------ */

static void payload_evidence(bm_head_t *t, int32_t bi, size_t v, bm_buf_t *raw)
{
    blk_t *b = &t->blk[bi];
    if (raw && !b->raw_full)
        b->raw_full = bm_buf_ref(raw);
    if (b->payload_full)
        return;
    b->payload_full = true;
    if (t->has_head && eq(b->root, t->head)) {
        note_t n = {.kind = N_PAYLOAD};
        memcpy(n.u.payload.root, b->root, 32);
        n.u.payload.slot = b->slot;
        n.u.payload.node = (int)v;
        n.u.payload.raw = bm_buf_ref(raw);
        n.u.payload.at_ms = t->now;
        bm_hd_push(t, &n);
    }
}

/* ---- node heads --------------------------------------------------------------------- */

static void clear_pending(node_t *v)
{
    if (v->has_pending)
        bm_buf_unref(v->pend.raw);
    v->has_pending = false;
    v->pend.raw = NULL;
}

static void record_delay(bm_head_t *t, node_t *v, pend_t *p)
{
    if (p->delay_done)
        return;
    p->delay_done = true;
    if (p->polled)
        return; /* when beaconmux asked, not when the node had it */
    int64_t d = (int64_t)p->received_ms - (int64_t)slot_start(t, p->slot);
    if (d > INT32_MAX)
        d = INT32_MAX;
    if (d < INT32_MIN)
        d = INT32_MIN;
    v->delays[v->delay_pos] = (int32_t)d;
    v->delay_pos = (v->delay_pos + 1) % BM_HEAD_DELAYS;
    if (v->n_delays < BM_HEAD_DELAYS)
        v->n_delays++;
}

/* A trusted node announced block bi: first voter, its raw data, payload evidence. */
static void credit(bm_head_t *t, int32_t bi, size_t vi, bm_head_topic_t topic,
                   bm_payload_status_t payload, bm_buf_t *raw)
{
    blk_t *b = &t->blk[bi];
    if (b->first_voter < 0)
        b->first_voter = (int16_t)vi;
    if (raw && !b->raw[topic])
        b->raw[topic] = bm_buf_ref(raw);
    if (payload == BM_PAYLOAD_FULL)
        payload_evidence(t, bi, vi, raw);
}

/* Makes `p` the node's believed head. Takes over p->raw. */
static void apply(bm_head_t *t, size_t vi, pend_t *p)
{
    node_t *v = &t->nodes[vi];
    if (v->has_pending && &v->pend != p)
        clear_pending(v);
    v->has_head = true;
    v->stale = false;
    v->connected = true;
    v->slot = p->slot;
    memcpy(v->root, p->root, 32);
    v->payload = p->payload;
    v->topic = p->topic;
    v->received_ms = p->received_ms;
    v->polled = p->polled;
    v->optimistic = p->optimistic;
    v->head_optimistic = p->optimistic;
    if (v->has_reorg && !eq(v->reorg_to, p->root))
        v->has_reorg = false; /* a later move: the reorg record no longer describes its head */
    bm_buf_t *raw = p->raw;
    p->raw = NULL;
    if (&v->pend == p)
        v->has_pending = false;
    int32_t bi = bm_hd_blk_get(t, v->root, v->slot, true, v->received_ms);
    if (bi >= 0) {
        if (t->blk[bi].first_node < 0 && !v->observer)
            t->blk[bi].first_node = (int16_t)vi;
        if (trusted(v))
            credit(t, bi, vi, v->topic, v->payload, raw);
    }
    bm_buf_unref(raw);
    note_node(t, vi);
}

/* Judges an announcement (at receipt, or later when the clock becomes known). Takes p->raw. */
static void announce(bm_head_t *t, size_t vi, pend_t p)
{
    node_t *v = &t->nodes[vi];
    if (!t->clock_known) {
        clear_pending(v);
        v->pend = p;
        v->has_pending = true;
        note_node(t, vi);
        return;
    }
    uint64_t start = slot_start(t, p.slot);
    if (ahead(t, p.slot, p.received_ms)) {
        /* More than a slot ahead of our clock when it arrived: the node's clock (or the
         * node) is wrong. Ignored, and the node is time-discrepant until a sane head. */
        v->td_head = true;
        v->td_slot = p.slot;
        v->td_early_ms = start - p.received_ms;
        t->stats.ignored_future++;
        bm_buf_unref(p.raw);
        clear_pending(v);
        note_node(t, vi);
        return;
    }
    if (v->td_head) {
        v->td_head = false;
        note_node(t, vi);
    }
    if (v->optimistic != p.optimistic) {
        v->optimistic = p.optimistic;
        note_node(t, vi);
    }
    if (v->has_head && eq(v->root, p.root)) {
        /* The same block again: a payload status update (head_v2), a repeat, or the
         * block's payload verified since (no longer optimistic). */
        clear_pending(v);
        v->stale = false;
        v->connected = true;
        if (v->polled && !p.polled) {
            /* its stream announced the head a poll found: no longer only polled, but the
             * event is no arrival time either (it may be a later payload update) */
            v->polled = false;
            note_node(t, vi);
        }
        if (p.payload != BM_PAYLOAD_UNKNOWN && p.payload != v->payload) {
            v->payload = p.payload;
            note_node(t, vi);
        }
        v->head_optimistic = p.optimistic;
        if (trusted(v)) {
            int32_t bi = bm_hd_blk_get(t, p.root, p.slot, true, p.received_ms);
            if (bi >= 0)
                credit(t, bi, vi, v->topic, v->payload, p.raw);
        }
        bm_buf_unref(p.raw);
        return;
    }
    if (v->has_pending && eq(v->pend.root, p.root)) {
        if (p.payload != BM_PAYLOAD_UNKNOWN)
            v->pend.payload = p.payload;
        v->pend.optimistic = p.optimistic;
        if (p.raw) {
            bm_buf_unref(v->pend.raw);
            v->pend.raw = p.raw;
        }
        return;
    }
    record_delay(t, v, &p);
    if (t->now + BM_HEAD_DISPARITY_MS < start) {
        clear_pending(v);
        v->pend = p;
        v->has_pending = true;
        note_node(t, vi);
        return;
    }
    apply(t, vi, &p);
}

/* Pending heads whose time has come become believed. */
static void process_pending(bm_head_t *t)
{
    if (!t->clock_known)
        return;
    for (size_t v = 0; v < t->n; v++) {
        node_t *nv = &t->nodes[v];
        if (!nv->has_pending)
            continue;
        if (!nv->pend.delay_done) {
            /* It arrived before the clock was known: judge it as of its arrival. */
            pend_t p = nv->pend;
            nv->has_pending = false;
            announce(t, v, p);
            continue;
        }
        if (t->now + BM_HEAD_DISPARITY_MS >= slot_start(t, nv->pend.slot))
            apply(t, v, &nv->pend);
    }
}

/* ---- the decision ------------------------------------------------------------------- */

/*
 * Re-judges every node against the cluster head. A node off the cluster chain for more
 * than a slot is forked, but only while `quorum` voters are on that chain (at, behind or
 * ahead of the head): "forked" means off the chain the cluster agrees on. When no quorum
 * is on it any more (the nodes scattered, or all moved elsewhere), nobody is forked, so
 * that they can vote again and a quorum can form; otherwise a cluster whose nodes all
 * left its head would exclude them all and never move again.
 *
 * "On the chain" is the last proven judgement: a voter whose new head's ancestry is not
 * known (its header on the way, or not to be had) has proven nothing, so it keeps counting
 * as it did. Otherwise every honest node announcing a block whose header is a few hundred
 * milliseconds away would, for that while, leave no quorum on the chain and un-fork every
 * forked node (which is then ready, a voter, a duties candidate) at every slot.
 */
/*
 * Does a quorum of other voters hold the cluster's side of the split between node `vi`'s
 * head and the cluster head? A voter counts when its head is the cluster head, a
 * descendant of it, or an ancestor of it above the split (the common ancestor of the two
 * heads): a node lagging at or below the split agrees with both sides and proves nothing.
 * Without a known split (ancestry not learned yet) only the head and its descendants count.
 */
static bool side_agreed(const bm_head_t *t, size_t vi, const bm_head_relation_t *rels)
{
    const node_t *v = &t->nodes[vi];
    uint8_t split[32];
    uint64_t split_slot = 0;
    bool split_known = bm_hd_common_ancestor(t, v->root, t->head, split, &split_slot);
    uint32_t n = 0;
    for (size_t ui = 0; ui < t->n; ui++) {
        const node_t *u = &t->nodes[ui];
        if (ui == vi || !voter(u) || !u->on_chain)
            continue;
        bm_head_relation_t r = rels[ui];
        if (r == BM_HEAD_REL_UNKNOWN)
            r = u->proven_rel; /* its header is on the way: its last proven relation */
        if (r == BM_HEAD_REL_EQUAL || r == BM_HEAD_REL_DESCENDANT ||
            (r == BM_HEAD_REL_ANCESTOR && split_known &&
             bm_hd_root_slot(t, u->root, u->slot) > split_slot))
            n++;
    }
    return n >= t->quorum;
}

static void update_relations(bm_head_t *t)
{
    bool pend[BM_MAX_NODES];
    bm_head_relation_t rels[BM_MAX_NODES];
    uint32_t on_chain = 0;
    for (size_t vi = 0; vi < t->n; vi++) {
        node_t *v = &t->nodes[vi];
        rels[vi] = BM_HEAD_REL_NONE;
        pend[vi] = false;
        if (t->has_head && v->has_head)
            rels[vi] = bm_hd_relation_ex(t, v->root, bm_hd_root_slot(t, v->root, v->slot), NULL,
                                         &pend[vi]);
        if (rels[vi] != BM_HEAD_REL_UNKNOWN) {
            v->on_chain = rels[vi] == BM_HEAD_REL_EQUAL || rels[vi] == BM_HEAD_REL_ANCESTOR ||
                          rels[vi] == BM_HEAD_REL_DESCENDANT;
            v->proven_rel = rels[vi];
        }
        on_chain += voter(v) && v->on_chain;
    }
    bool agreed = on_chain >= t->quorum;
    t->agreed = agreed;
    for (size_t vi = 0; vi < t->n; vi++) {
        node_t *v = &t->nodes[vi];
        bm_head_relation_t rel = rels[vi];
        bool pending = pend[vi];
        if (rel == BM_HEAD_REL_UNKNOWN && pending && v->off)
            rel = BM_HEAD_REL_OFF; /* its header is on the way: keep judging as before */
        bool changed = rel != v->rel;
        v->rel = rel;
        switch (rel) {
        case BM_HEAD_REL_OFF:
            if (!v->off) {
                v->off = true;
                v->off_since_ms = t->now;
                changed = true;
            }
            if (!pending)
                memcpy(v->off_root, v->root, 32);
            break;
        case BM_HEAD_REL_UNKNOWN:
            /* Unknown ancestry proves nothing: a new head stops an off-chain timer (once
             * its header cannot be had), but a forked node stays forked until it is
             * proven back on the chain. */
            if (v->off && !eq(v->off_root, v->root)) {
                v->off = false;
                v->off_since_ms = 0;
                changed = true;
            }
            break;
        default:
            if (v->off || v->forked) {
                v->off = false;
                v->off_since_ms = 0;
                v->forked = false;
                changed = true;
            }
            break;
        }
        /* forked means off the side of the split that a quorum holds: being off a
         * chain that a single other node drives proves nothing about who is right */
        v->agreed = agreed && v->off && side_agreed(t, vi, rels);
        if (v->forked && !v->agreed) {
            v->forked = false; /* the off timer stays: it is forked again once a quorum is back */
            changed = true;
        } else if (v->off && !v->forked && v->agreed && t->clock_known &&
                   t->now > v->off_since_ms + t->clock.slot_ms) {
            v->forked = true;
            changed = true;
        }
        if (changed)
            note_node(t, vi);
    }
}

typedef struct cand {
    uint8_t root[32];
    uint64_t slot;
    uint64_t seen;
    uint32_t support;
    bool out; /* filtered out */
} cand_t;

/* Voters whose head is `root` or a known descendant of it. */
static uint32_t support(const bm_head_t *t, const uint8_t root[32], uint64_t slot)
{
    uint32_t s = 0;
    for (size_t v = 0; v < t->n; v++) {
        const node_t *nv = &t->nodes[v];
        if (voter(nv) && (eq(nv->root, root) || bm_hd_is_anc(t, root, slot, nv->root, NULL) == YES))
            s++;
    }
    return s;
}

/* Adds voter v's head to the candidate list unless already there. */
static size_t add_cand(const bm_head_t *t, cand_t *c, size_t nc, const node_t *v)
{
    for (size_t i = 0; i < nc; i++)
        if (eq(c[i].root, v->root))
            return nc;
    memset(&c[nc], 0, sizeof c[nc]);
    memcpy(c[nc].root, v->root, 32);
    c[nc].slot = bm_hd_root_slot(t, v->root, v->slot);
    int32_t bi = bm_hd_blk_find(t, v->root);
    c[nc].seen = bi >= 0 ? t->blk[bi].first_seen_ms : v->received_ms;
    return nc + 1;
}

/*
 * Among candidates with at least `need` supporters, drops those with a qualifying
 * descendant among them (the deepest agreed block wins over its ancestors), then picks
 * the most supported, then the first seen, then the lowest root (determinism). -1: none.
 */
static int pick(const bm_head_t *t, cand_t *c, size_t nc, uint32_t need)
{
    for (size_t i = 0; i < nc; i++) {
        c[i].support = support(t, c[i].root, c[i].slot);
        c[i].out = c[i].support < need;
    }
    for (size_t i = 0; i < nc; i++) {
        if (c[i].out)
            continue;
        for (size_t j = 0; j < nc; j++)
            if (j != i && c[j].support >= need &&
                bm_hd_is_anc(t, c[i].root, c[i].slot, c[j].root, NULL) == YES) {
                c[i].out = true;
                break;
            }
    }
    int best = -1;
    for (size_t i = 0; i < nc; i++) {
        if (c[i].out)
            continue;
        if (best < 0) {
            best = (int)i;
            continue;
        }
        const cand_t *b = &c[best];
        if (c[i].support != b->support ? c[i].support > b->support
            : c[i].seen != b->seen     ? c[i].seen < b->seen
                                       : memcmp(c[i].root, b->root, 32) < 0)
            best = (int)i;
    }
    return best;
}

static int announcer(const bm_head_t *t, const uint8_t root[32])
{
    int32_t bi = bm_hd_blk_find(t, root);
    if (bi >= 0 && t->blk[bi].first_voter >= 0)
        return t->blk[bi].first_voter;
    int best = -1;
    for (size_t v = 0; v < t->n; v++) {
        const node_t *nv = &t->nodes[v];
        if (voter(nv) && eq(nv->root, root) &&
            (best < 0 || nv->received_ms < t->nodes[best].received_ms))
            best = (int)v;
    }
    if (best < 0 && bi >= 0)
        best = t->blk[bi].first_node;
    return best;
}

static void mark_abandoned(bm_head_t *t, const uint8_t from[32], bool to_known, uint64_t to_slot)
{
    int32_t cur = bm_hd_blk_find(t, from);
    for (uint32_t steps = 0; cur >= 0 && steps <= t->cap; steps++) {
        blk_t *b = &t->blk[cur];
        if (to_known && b->slot_known && b->slot <= to_slot)
            break;
        b->abandoned = true;
        if (!to_known || b->pstate != P_KNOWN)
            break;
        cur = bm_hd_blk_find(t, b->parent);
    }
}

/* Moves the cluster head to `root` and queues the notification. */
static void set_head(bm_head_t *t, const uint8_t root_in[32], uint64_t slot, bool by_quorum)
{
    uint8_t root[32];
    memcpy(root, root_in, 32);
    note_t n = {.kind = N_HEAD};
    bm_head_change_t *c = &n.u.change;
    c->by_quorum = by_quorum;
    c->has_old = t->has_head;
    memcpy(c->root, root, 32);
    c->slot = slot;
    c->at_ms = t->now;
    if (!t->has_head) {
        c->move = BM_HEAD_MOVE_FIRST;
    } else {
        memcpy(c->old_root, t->head, 32);
        c->old_slot = t->head_slot;
        bm_head_relation_t rel = bm_hd_relation(t, root, slot, NULL);
        if (rel == BM_HEAD_REL_DESCENDANT) {
            c->move = BM_HEAD_MOVE_EXTEND;
        } else if (rel == BM_HEAD_REL_ANCESTOR) {
            c->move = BM_HEAD_MOVE_REORG;
            c->depth_known = true;
            memcpy(c->ancestor, root, 32);
            c->ancestor_slot = slot;
        } else if (rel == BM_HEAD_REL_OFF) {
            c->move = BM_HEAD_MOVE_REORG;
            c->depth_known =
                bm_hd_common_ancestor(t, t->head, root, c->ancestor, &c->ancestor_slot);
        } else {
            c->move = BM_HEAD_MOVE_JUMP;
        }
        if (c->depth_known)
            c->depth = t->head_slot - c->ancestor_slot;
        if (c->move == BM_HEAD_MOVE_REORG || c->move == BM_HEAD_MOVE_JUMP)
            mark_abandoned(t, t->head, c->depth_known, c->ancestor_slot);
    }
    int32_t bi = bm_hd_blk_find(t, root);
    if (bi >= 0) {
        blk_t *b = &t->blk[bi];
        b->abandoned = false;
        c->parent_known = b->pstate == P_KNOWN;
        if (c->parent_known)
            memcpy(c->parent, b->parent, 32);
        c->payload_full = b->payload_full;
        for (int k = 0; k < BM_HEAD_TOPIC_COUNT; k++)
            c->raw[k] = bm_buf_ref(b->raw[k]);
        c->raw_full = bm_buf_ref(b->raw_full);
    }
    c->node = announcer(t, root);
    if (c->node >= 0)
        t->nodes[c->node].firsts++;
    if (c->move == BM_HEAD_MOVE_REORG) {
        for (int pass = 0; pass < 2 && !c->raw_reorg; pass++)
            for (size_t v = 0; v < t->n && !c->raw_reorg; v++) {
                const node_t *nv = &t->nodes[v];
                if (nv->has_reorg && nv->reorg_raw && trusted(nv) && eq(nv->reorg_to, root) &&
                    (pass == 1 || eq(nv->reorg_from, t->head)))
                    c->raw_reorg = bm_buf_ref(nv->reorg_raw);
            }
    }
    t->stats.moves[c->move]++;
    char a[BM_ROOT_SHORT_LEN + 1], b2[BM_ROOT_SHORT_LEN + 1];
    if (c->move == BM_HEAD_MOVE_REORG || c->move == BM_HEAD_MOVE_JUMP) {
        char depth[24] = "unknown";
        if (c->depth_known)
            snprintf(depth, sizeof depth, "%" PRIu64, c->depth);
        bm_log(BM_LOG_INFO,
               "head: cluster head %s %s@%" PRIu64 " -> %s@%" PRIu64
               " (depth %s, announced by node %d)",
               bm_head_move_name(c->move), bm_root_short(c->old_root, a), c->old_slot,
               bm_root_short(root, b2), slot, depth, c->node);
    } else if (bm_log_enabled(BM_LOG_DEBUG)) {
        bm_log(BM_LOG_DEBUG, "head: cluster head %s %s@%" PRIu64 " (node %d%s)",
               bm_head_move_name(c->move), bm_root_short(root, a), slot, c->node,
               by_quorum ? ", quorum" : "");
    }
    if (!t->has_head)
        t->origin_slot = slot;
    memcpy(t->head, root, 32);
    t->head_slot = slot;
    t->head_since_ms = t->now;
    t->has_head = true;
    bm_hd_push(t, &n);
}

/*
 * Steps 1 and 2 of a decision: moves that need a quorum.
 * 1. Back to an ancestor: only voters that said chain_reorg to it and hold it count.
 * 2. Anything off the cluster chain (or of unknown ancestry at a later slot): `quorum`
 *    supporters and more than the head has (or as many, at a later slot).
 */
static bool try_quorum(bm_head_t *t, cand_t *c, size_t nc)
{
    uint32_t sup_head = support(t, t->head, t->head_slot);

    int back = -1;
    uint32_t back_n = 0;
    for (size_t i = 0; i < nc; i++) {
        if (c[i].slot >= t->head_slot ||
            bm_hd_is_anc(t, c[i].root, c[i].slot, t->head, NULL) != YES)
            continue;
        uint32_t k = 0;
        for (size_t v = 0; v < t->n; v++) {
            const node_t *nv = &t->nodes[v];
            /* the reorg must leave the cluster chain (its old head is the cluster head or
             * one of its ancestors): a record of an older reorg, already followed, would
             * otherwise pull the head back from every later extension */
            k += voter(nv) && nv->has_reorg && eq(nv->reorg_to, c[i].root) &&
                 eq(nv->root, c[i].root) &&
                 (eq(nv->reorg_from, t->head) ||
                  bm_hd_is_anc(t, nv->reorg_from, bm_hd_root_slot(t, nv->reorg_from, 0), t->head,
                               NULL) == YES);
        }
        if (k > back_n || (k == back_n && back >= 0 && k > 0 && c[i].slot > c[back].slot)) {
            back = (int)i;
            back_n = k;
        }
    }
    if (back >= 0 && back_n >= t->quorum && back_n > sup_head) {
        set_head(t, c[back].root, c[back].slot, true);
        return true;
    }

    cand_t q[BM_MAX_NODES];
    size_t nq = 0;
    for (size_t i = 0; i < nc; i++) {
        bool pending;
        bm_head_relation_t rel = bm_hd_relation_ex(t, c[i].root, c[i].slot, NULL, &pending);
        /* Unknown ancestry at a later slot may jump, once nothing more can be learned. */
        if (rel == BM_HEAD_REL_OFF ||
            (rel == BM_HEAD_REL_UNKNOWN && !pending && c[i].slot > t->head_slot))
            q[nq++] = c[i];
    }
    int b = nq ? pick(t, q, nq, t->quorum) : -1;
    if (b >= 0 &&
        (q[b].support > sup_head || (q[b].support == sup_head && q[b].slot > t->head_slot))) {
        set_head(t, q[b].root, q[b].slot, true);
        return true;
    }
    return false;
}

/* One move if a rule allows it. */
static bool try_move(bm_head_t *t)
{
    cand_t c[BM_MAX_NODES];
    size_t nc = 0;
    for (size_t v = 0; v < t->n; v++)
        if (voter(&t->nodes[v]))
            nc = add_cand(t, c, nc, &t->nodes[v]);
    if (nc == 0)
        return false;

    if (!t->has_head) {
        int b = pick(t, c, nc, t->quorum);
        if (b < 0)
            return false;
        set_head(t, c[b].root, c[b].slot, true);
        return true;
    }

    /* Quorum rules count supporters; a voter whose new head's header is on the way
     * supports nothing provable yet, so counting now could flip the head for the few
     * milliseconds the answer takes. They wait; extension does not. */
    bool settled = true;
    for (size_t v = 0; v < t->n && settled; v++) {
        const node_t *nv = &t->nodes[v];
        bool pending;
        if (voter(nv) && bm_hd_relation_ex(t, nv->root, bm_hd_root_slot(t, nv->root, nv->slot),
                                           NULL, &pending) == BM_HEAD_REL_UNKNOWN)
            settled = !pending;
    }
    if (settled && try_quorum(t, c, nc))
        return true;

    /* 3. Extension: descends from the head through known links, nothing abandoned. */
    cand_t e[BM_MAX_NODES];
    size_t ne = 0;
    for (size_t i = 0; i < nc; i++) {
        bool crossed = false;
        if (bm_hd_relation(t, c[i].root, c[i].slot, &crossed) != BM_HEAD_REL_DESCENDANT || crossed)
            continue;
        int32_t bi = bm_hd_blk_find(t, c[i].root);
        if (bi >= 0 && t->blk[bi].abandoned)
            continue;
        e[ne++] = c[i];
    }
    int b = ne ? pick(t, e, ne, 1) : -1;
    if (b >= 0) {
        set_head(t, e[b].root, e[b].slot, false);
        return true;
    }
    return false;
}

static void evaluate(bm_head_t *t)
{
    if (!t->clock_known)
        return;
    for (int i = 0; i < MAX_MOVES_PER_EVAL; i++) {
        bm_hd_request_parents(t); /* first: what is being fetched is waited for, not guessed */
        update_relations(t);
        if (!try_move(t))
            break;
    }
    bm_hd_request_parents(t);
    update_relations(t);
}

/* ---- input framing ------------------------------------------------------------------ */

static void fetch_timeouts(bm_head_t *t)
{
    if (!t->clock_known)
        return;
    uint64_t limit = (uint64_t)t->o.fetch_timeout_slots * t->clock.slot_ms;
    for (uint32_t i = 0; i < t->nblk; i++) {
        blk_t *b = &t->blk[i];
        if (b->pstate != P_ASKING || b->asked_at_ms + limit > t->now)
            continue;
        if (b->asking >= 0 && t->nodes[b->asking].inflight > 0)
            t->nodes[b->asking].inflight--;
        b->pstate = P_UNKNOWN;
        b->asking = -1;
        t->stats.fetch_timeouts++;
    }
}

static void enter(bm_head_t *t, uint64_t now_ms)
{
    t->depth++;
    if (now_ms > t->now)
        t->now = now_ms;
    process_pending(t);
    if (t->clock_known) {
        uint64_t wall = bm_slot_at(&t->clock, t->now);
        if (wall != t->pruned_at_slot) {
            t->pruned_at_slot = wall;
            bm_hd_prune(t, false);
        }
    }
}

static void leave(bm_head_t *t)
{
    evaluate(t);
    if (--t->depth == 0 && !t->draining)
        drain(t);
}

/* ---- lifecycle ---------------------------------------------------------------------- */

void bm_head_opts_default(bm_head_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->quorum = 1;
    o->max_blocks = 2048;
    o->keep_epochs = 4;
    o->chase_epochs = 2;
    o->max_fetch_per_node = 4;
    o->max_fetch_per_slot = 64;
    o->fetch_timeout_slots = 2;
}

bm_head_t *bm_head_new(size_t n_nodes, const bm_head_opts_t *opts)
{
    if (n_nodes == 0 || n_nodes > BM_MAX_NODES)
        return NULL;
    bm_head_t *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    if (opts)
        t->o = *opts;
    else
        bm_head_opts_default(&t->o);
    if (t->o.quorum < 1)
        t->o.quorum = 1;
    if (t->o.keep_epochs < 1)
        t->o.keep_epochs = 1;
    if (t->o.max_fetch_per_node < 1)
        t->o.max_fetch_per_node = 1;
    if (t->o.max_fetch_per_slot < 1)
        t->o.max_fetch_per_slot = 1;
    if (t->o.fetch_timeout_slots < 1)
        t->o.fetch_timeout_slots = 1;
    t->quorum = t->o.quorum;
    t->n = n_nodes;
    t->cap = t->o.max_blocks;
    if (t->cap < 4 * n_nodes + 64)
        t->cap = (uint32_t)(4 * n_nodes + 64);
    if (t->cap > (1u << 24))
        t->cap = 1u << 24;
    uint32_t isz = 1;
    while (isz < 2 * t->cap)
        isz <<= 1;
    t->imask = isz - 1;
    t->nodes = calloc(n_nodes, sizeof *t->nodes);
    t->blk = calloc(t->cap, sizeof *t->blk);
    t->idx = calloc(isz, sizeof *t->idx);
    if (!t->nodes || !t->blk || !t->idx) {
        bm_head_free(t);
        return NULL;
    }
    for (size_t v = 0; v < n_nodes; v++)
        t->nodes[v].may_vote = true;
    t->seed = bm_clock_mono_us() ^ (uint64_t)(uintptr_t)t ^ 0x243f6a8885a308d3ull;
    return t;
}

static void forget_node_head(node_t *v)
{
    clear_pending(v);
    bm_buf_unref(v->reorg_raw);
    v->reorg_raw = NULL;
    v->has_reorg = false;
}

void bm_head_free(bm_head_t *t)
{
    if (!t)
        return;
    if (t->blk)
        for (uint32_t i = 0; i < t->nblk; i++)
            bm_hd_blk_release(t, &t->blk[i]);
    if (t->nodes)
        for (size_t v = 0; v < t->n; v++)
            forget_node_head(&t->nodes[v]);
    for (size_t i = t->qhead; i < t->qn; i++)
        release(&t->q[i]);
    free(t->q);
    free(t->blk);
    free(t->idx);
    free(t->nodes);
    free(t);
}

int bm_head_listen(bm_head_t *t, const bm_head_listener_t *l, void *ud)
{
    if (!t || !l)
        return BM_EINVAL;
    if (t->nlis == BM_HEAD_MAX_LISTENERS)
        return BM_ENOMEM;
    t->lis[t->nlis].l = *l;
    t->lis[t->nlis].ud = ud;
    t->nlis++;
    return 0;
}

void bm_head_unlisten(bm_head_t *t, void *ud)
{
    size_t w = 0;
    for (size_t i = 0; i < t->nlis; i++)
        if (t->lis[i].ud != ud)
            t->lis[w++] = t->lis[i];
    t->nlis = w;
}

void bm_head_set_fetch(bm_head_t *t, bm_head_fetch_fn fn, void *ud)
{
    t->fetch = fn;
    t->fetch_ud = ud;
}

static void reset_knowledge(bm_head_t *t)
{
    for (uint32_t i = 0; i < t->nblk; i++)
        bm_hd_blk_release(t, &t->blk[i]);
    t->nblk = 0;
    memset(t->idx, 0, (size_t)(t->imask + 1) * sizeof *t->idx);
    t->has_head = false;
    for (size_t vi = 0; vi < t->n; vi++) {
        node_t *v = &t->nodes[vi];
        forget_node_head(v);
        bool connected = v->connected, may_vote = v->may_vote, observer = v->observer;
        memset(v, 0, sizeof *v);
        v->connected = connected;
        v->may_vote = may_vote;
        v->observer = observer;
        note_node(t, vi);
    }
}

int bm_head_set_clock(bm_head_t *t, const bm_slot_clock_t *c, uint64_t now_ms)
{
    if (!t || !c || !bm_slot_clock_valid(c))
        return BM_EINVAL;
    if (t->clock_known && memcmp(&t->clock, c, sizeof *c) == 0)
        return 0;
    t->depth++;
    if (now_ms > t->now)
        t->now = now_ms;
    if (t->clock_known) {
        bm_log(BM_LOG_WARN, "head: the chain's clock changed; head knowledge is reset");
        reset_knowledge(t);
    }
    t->clock = *c;
    t->clock_known = true;
    t->pruned_at_slot = bm_slot_at(&t->clock, t->now);
    for (size_t vi = 0; vi < t->n; vi++) {
        node_t *v = &t->nodes[vi];
        if (!v->has_sync)
            continue;
        bool td = ahead(t, v->sync_slot, v->sync_at_ms);
        if (td != v->td_sync) {
            v->td_sync = td;
            v->td_slot = v->sync_slot;
            note_node(t, vi);
        }
    }
    process_pending(t);
    leave(t);
    return 0;
}

void bm_head_set_quorum(bm_head_t *t, uint32_t quorum)
{
    if (quorum < 1)
        quorum = 1;
    if (quorum == t->quorum)
        return;
    enter(t, t->now);
    t->quorum = quorum;
    leave(t);
}

uint32_t bm_head_quorum(const bm_head_t *t)
{
    return t->quorum;
}

/* Sets one of a node's flags inside enter/leave; a change is noted, so the node's part in the
 * verdict is looked at again. */
static void set_node_flag(bm_head_t *t, size_t node, bool *flag, bool value, uint64_t now_ms)
{
    enter(t, now_ms);
    if (*flag != value) {
        *flag = value;
        note_node(t, node);
    }
    leave(t);
}

void bm_head_set_node_vote(bm_head_t *t, size_t node, bool may_vote)
{
    if (node < t->n && t->nodes[node].may_vote != may_vote)
        set_node_flag(t, node, &t->nodes[node].may_vote, may_vote, t->now);
}

void bm_head_set_node_observer(bm_head_t *t, size_t node, bool observer)
{
    if (node < t->n && t->nodes[node].observer != observer)
        set_node_flag(t, node, &t->nodes[node].observer, observer, t->now);
}

/* ---- inputs ------------------------------------------------------------------------- */

static bm_buf_t *copy_raw(const char *raw, size_t len)
{
    if (!raw || len == 0 || len > BM_HEAD_RAW_MAX)
        return NULL;
    return bm_buf_copy(raw, len);
}

int bm_head_on_head(bm_head_t *t, size_t node, const bm_head_event_t *ev, uint64_t now_ms)
{
    if (!t || !ev || node >= t->n || (unsigned)ev->topic >= BM_HEAD_TOPIC_COUNT ||
        (unsigned)ev->payload > BM_PAYLOAD_FULL)
        return BM_EINVAL;
    enter(t, now_ms);
    node_t *v = &t->nodes[node];
    if (!v->connected) {
        v->connected = true;
        note_node(t, node);
    }
    pend_t p = {0};
    p.slot = ev->slot;
    memcpy(p.root, ev->root, 32);
    p.optimistic = ev->optimistic;
    p.payload = ev->payload;
    p.topic = ev->topic;
    p.received_ms = now_ms;
    p.polled = ev->polled;
    p.raw = copy_raw(ev->raw, ev->raw_len);
    announce(t, node, p);
    leave(t);
    return 0;
}

int bm_head_on_block(bm_head_t *t, size_t node, uint64_t slot, const uint8_t root[32],
                     uint64_t now_ms)
{
    if (!t || !root || node >= t->n)
        return BM_EINVAL;
    enter(t, now_ms);
    if (t->clock_known && !ahead(t, slot, now_ms))
        bm_hd_blk_get(t, root, slot, true, now_ms);
    leave(t);
    return 0;
}

int bm_head_on_parent(bm_head_t *t, size_t node, const uint8_t root[32], uint64_t slot,
                      const uint8_t parent[32], uint64_t now_ms)
{
    if (!t || !root || !parent || node >= t->n)
        return BM_EINVAL;
    enter(t, now_ms);
    int rc = 0;
    int32_t i = bm_hd_blk_find(t, root);
    if (i >= 0 && t->blk[i].pstate == P_ASKING && t->blk[i].asking == (int)node) {
        if (t->nodes[node].inflight > 0)
            t->nodes[node].inflight--;
        t->blk[i].pstate = P_UNKNOWN;
        t->blk[i].asking = -1;
    }
    int32_t pi = bm_hd_blk_find(t, parent);
    bool bad = eq(root, parent) || slot == SLOT_UNKNOWN ||
               (i >= 0 && t->blk[i].slot_known && t->blk[i].slot != slot) ||
               (i >= 0 && t->blk[i].pstate == P_KNOWN && !eq(t->blk[i].parent, parent)) ||
               (pi >= 0 && t->blk[pi].slot_known && t->blk[pi].slot >= slot);
    if (bad) {
        char a[BM_ROOT_SHORT_LEN + 1];
        t->stats.bad_answers++;
        bm_log(BM_LOG_DEBUG, "head: node %zu's header for %s contradicts what is known", node,
               bm_root_short(root, a));
        rc = BM_EPROTO;
    } else if (i < 0 || t->blk[i].pstate != P_KNOWN) {
        i = bm_hd_blk_get(t, root, slot, true, now_ms);
        if (i >= 0) {
            memcpy(t->blk[i].parent, parent, 32);
            t->blk[i].pstate = P_KNOWN;
            t->blk[i].asking = -1;
        }
    }
    leave(t);
    return rc;
}

int bm_head_on_parent_failed(bm_head_t *t, size_t node, const uint8_t root[32], uint64_t now_ms)
{
    if (!t || !root || node >= t->n)
        return BM_EINVAL;
    enter(t, now_ms);
    int32_t i = bm_hd_blk_find(t, root);
    if (i >= 0 && t->blk[i].pstate == P_ASKING && t->blk[i].asking == (int)node) {
        if (t->nodes[node].inflight > 0)
            t->nodes[node].inflight--;
        t->blk[i].pstate = P_UNKNOWN;
        t->blk[i].asking = -1;
        t->stats.fetch_failures++;
    }
    leave(t);
    return 0;
}

int bm_head_on_reorg(bm_head_t *t, size_t node, const bm_head_reorg_event_t *ev, uint64_t now_ms)
{
    if (!t || !ev || node >= t->n)
        return BM_EINVAL;
    enter(t, now_ms);
    node_t *v = &t->nodes[node];
    if (!ev->optimistic) {
        v->has_reorg = true;
        memcpy(v->reorg_from, ev->old_head, 32);
        memcpy(v->reorg_to, ev->new_head, 32);
        bm_buf_unref(v->reorg_raw);
        v->reorg_raw = copy_raw(ev->raw, ev->raw_len);
        note_node(t, node);
    }
    leave(t);
    return 0;
}

int bm_head_on_payload_available(bm_head_t *t, size_t node, uint64_t slot, const uint8_t root[32],
                                 uint64_t now_ms)
{
    if (!t || !root || node >= t->n)
        return BM_EINVAL;
    enter(t, now_ms);
    if (t->clock_known && trusted(&t->nodes[node]) && !ahead(t, slot, now_ms)) {
        int32_t bi = bm_hd_blk_get(t, root, slot, true, now_ms);
        if (bi >= 0)
            payload_evidence(t, bi, node, NULL);
    }
    leave(t);
    return 0;
}

int bm_head_on_sync_head(bm_head_t *t, size_t node, uint64_t head_slot, uint64_t now_ms)
{
    if (!t || node >= t->n)
        return BM_EINVAL;
    enter(t, now_ms);
    node_t *v = &t->nodes[node];
    v->has_sync = true;
    v->sync_slot = head_slot;
    v->sync_at_ms = now_ms;
    if (t->clock_known) {
        bool td = ahead(t, head_slot, now_ms);
        if (td) {
            v->td_slot = head_slot;
            v->td_early_ms = slot_start(t, head_slot) - now_ms;
        }
        if (td != v->td_sync) {
            v->td_sync = td;
            note_node(t, node);
        }
    }
    leave(t);
    return 0;
}

int bm_head_on_connect(bm_head_t *t, size_t node, uint64_t now_ms)
{
    if (!t || node >= t->n)
        return BM_EINVAL;
    set_node_flag(t, node, &t->nodes[node].connected, true, now_ms);
    return 0;
}

int bm_head_on_disconnect(bm_head_t *t, size_t node, uint64_t now_ms)
{
    if (!t || node >= t->n)
        return BM_EINVAL;
    enter(t, now_ms);
    node_t *v = &t->nodes[node];
    v->connected = false;
    if (v->has_head)
        v->stale = true;
    clear_pending(v);
    v->has_reorg = false;
    note_node(t, node);
    leave(t);
    return 0;
}

void bm_head_tick(bm_head_t *t, uint64_t now_ms)
{
    enter(t, now_ms);
    fetch_timeouts(t);
    evaluate(t);
    note_t n = {.kind = N_TICK};
    n.u.now = t->now;
    bm_hd_push(t, &n);
    leave(t);
}

uint64_t bm_head_next_wakeup_ms(const bm_head_t *t)
{
    if (!t->clock_known)
        return 0;
    uint64_t w = UINT64_MAX;
    for (size_t vi = 0; vi < t->n; vi++) {
        const node_t *v = &t->nodes[vi];
        if (v->has_pending) {
            uint64_t s = slot_start(t, v->pend.slot);
            uint64_t at = s > BM_HEAD_DISPARITY_MS ? s - BM_HEAD_DISPARITY_MS : 0;
            if (at < w)
                w = at;
        }
        /* only while a quorum is on the chain can the off timer fork the node: otherwise
         * its time passes with nothing to do, and a wake-up in the past would be asked
         * for again and again (a monitor re-arming a 0 ms timer from its callback) */
        if (v->agreed && v->off && !v->forked && v->off_since_ms + t->clock.slot_ms + 1 < w)
            w = v->off_since_ms + t->clock.slot_ms + 1;
    }
    uint64_t limit = (uint64_t)t->o.fetch_timeout_slots * t->clock.slot_ms;
    for (uint32_t i = 0; i < t->nblk; i++)
        if (t->blk[i].pstate == P_ASKING && t->blk[i].asked_at_ms + limit < w)
            w = t->blk[i].asked_at_ms + limit;
    return w == UINT64_MAX ? 0 : w;
}

/* ---- reads -------------------------------------------------------------------------- */

size_t bm_head_node_count(const bm_head_t *t)
{
    return t->n;
}

bool bm_head_chain_slot(const bm_head_t *t, uint64_t *slot)
{
    if (!t->clock_known || t->now < t->clock.genesis_ms)
        return false;
    if (slot)
        *slot = bm_slot_at(&t->clock, t->now);
    return true;
}

bool bm_head_cluster(const bm_head_t *t, bm_head_info_t *out)
{
    if (!t->has_head)
        return false;
    memset(out, 0, sizeof *out);
    memcpy(out->root, t->head, 32);
    out->slot = t->head_slot;
    out->since_ms = t->head_since_ms;
    out->origin_slot = t->origin_slot;
    out->first_node = -1;
    int32_t bi = bm_hd_blk_find(t, t->head);
    if (bi >= 0) {
        const blk_t *b = &t->blk[bi];
        out->parent_known = b->pstate == P_KNOWN;
        if (out->parent_known)
            memcpy(out->parent, b->parent, 32);
        out->payload_full = b->payload_full;
        out->first_node = b->first_voter >= 0 ? b->first_voter : b->first_node;
        out->first_seen_ms = b->first_seen_ms;
    }
    return true;
}

bool bm_head_payload_full(const bm_head_t *t)
{
    if (!t->has_head)
        return false;
    int32_t bi = bm_hd_blk_find(t, t->head);
    return bi >= 0 && t->blk[bi].payload_full;
}

int bm_head_node_view(const bm_head_t *t, size_t node, bm_head_node_view_t *out)
{
    if (!t || !out || node >= t->n)
        return BM_EINVAL;
    const node_t *v = &t->nodes[node];
    memset(out, 0, sizeof *out);
    out->connected = v->connected;
    out->has_head = v->has_head;
    out->stale = v->stale;
    out->slot = v->slot;
    memcpy(out->root, v->root, 32);
    int32_t bi = v->has_head ? bm_hd_blk_find(t, v->root) : -1;
    if (bi >= 0 && t->blk[bi].pstate == P_KNOWN) {
        out->parent_known = true;
        memcpy(out->parent, t->blk[bi].parent, 32);
    }
    out->payload = v->payload;
    out->topic = v->topic;
    out->optimistic = v->optimistic || v->head_optimistic;
    out->received_ms = v->received_ms;
    out->polled = v->polled;
    out->pending = v->has_pending;
    if (v->has_pending) {
        out->pending_slot = v->pend.slot;
        memcpy(out->pending_root, v->pend.root, 32);
    }
    out->td_head = v->td_head;
    out->td_sync = v->td_sync;
    out->time_discrepancy = v->td_head || v->td_sync;
    out->td_slot = v->td_slot;
    out->td_early_ms = v->td_early_ms;
    out->forked = v->forked;
    out->relation = v->rel;
    out->off_since_ms = v->off ? v->off_since_ms : 0;
    out->may_vote = v->may_vote;
    out->observer = v->observer;
    out->voter = voter(v);
    out->n_delays = v->n_delays;
    for (uint32_t k = 0; k < v->n_delays; k++)
        out->delays_ms[k] = v->delays[(v->delay_pos + BM_HEAD_DELAYS - 1 - k) % BM_HEAD_DELAYS];
    out->firsts = v->firsts;
    out->fetch_in_flight = v->inflight;
    return 0;
}

int bm_head_root_at_slot(const bm_head_t *t, uint64_t slot, uint8_t out[32])
{
    if (!t->has_head)
        return BM_EUNAVAIL;
    if (slot >= t->head_slot) {
        memcpy(out, t->head, 32);
        return 0;
    }
    int32_t cur = bm_hd_blk_find(t, t->head);
    for (uint32_t steps = 0; steps <= t->cap; steps++) {
        if (cur < 0 || t->blk[cur].pstate != P_KNOWN)
            return BM_ENOTFOUND;
        int32_t p = bm_hd_blk_find(t, t->blk[cur].parent);
        if ((p < 0 || !t->blk[p].slot_known) && t->blk[cur].parent_slot != SLOT_UNKNOWN &&
            t->blk[cur].parent_slot <= slot) {
            memcpy(out, t->blk[cur].parent, 32); /* its entry is gone, its slot is known */
            return 0;
        }
        if (p < 0 || !t->blk[p].slot_known)
            return BM_ENOTFOUND;
        if (t->blk[p].slot <= slot) {
            memcpy(out, t->blk[p].root, 32);
            return 0;
        }
        cur = p;
    }
    return BM_ENOTFOUND;
}

bm_head_relation_t bm_head_relation_of(const bm_head_t *t, const uint8_t a[32], const uint8_t b[32])
{
    if (!t)
        return BM_HEAD_REL_UNKNOWN;
    if (eq(a, b))
        return BM_HEAD_REL_EQUAL;
    uint64_t sa = bm_hd_root_slot(t, a, SLOT_UNKNOWN), sb = bm_hd_root_slot(t, b, SLOT_UNKNOWN);
    if (sa == SLOT_UNKNOWN || sb == SLOT_UNKNOWN)
        return BM_HEAD_REL_UNKNOWN;
    if (sa == sb)
        return BM_HEAD_REL_OFF; /* two blocks at one slot */
    int res = sa < sb ? bm_hd_is_anc(t, a, sa, b, NULL) : bm_hd_is_anc(t, b, sb, a, NULL);
    if (res == UNK)
        return BM_HEAD_REL_UNKNOWN;
    if (res == NO)
        return BM_HEAD_REL_OFF;
    return sa < sb ? BM_HEAD_REL_ANCESTOR : BM_HEAD_REL_DESCENDANT;
}

size_t bm_head_block_count(const bm_head_t *t)
{
    return t->nblk;
}

const bm_head_stats_t *bm_head_stats(const bm_head_t *t)
{
    return &t->stats;
}

const char *bm_head_move_name(bm_head_move_t m)
{
    static const char *const names[] = {"first", "extend", "reorg", "jump"};
    return (unsigned)m < 4 ? names[m] : "invalid";
}

const char *bm_payload_status_name(bm_payload_status_t s)
{
    static const char *const names[] = {"unknown", "empty", "full"};
    return (unsigned)s < 3 ? names[s] : "invalid";
}

bm_payload_status_t bm_payload_status_parse(const char *s, size_t len)
{
    if (s && len == 5 && memcmp(s, "empty", 5) == 0)
        return BM_PAYLOAD_EMPTY;
    if (s && len == 4 && memcmp(s, "full", 4) == 0)
        return BM_PAYLOAD_FULL;
    return BM_PAYLOAD_UNKNOWN;
}

const char *bm_head_relation_name(bm_head_relation_t r)
{
    static const char *const names[] = {"none",       "equal", "ancestor",
                                        "descendant", "off",   "unknown"};
    return (unsigned)r < 6 ? names[r] : "invalid";
}
