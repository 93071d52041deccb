/* SPDX-License-Identifier: MIT */
/*
 * head_blocks: the head tracker's block store (a bounded table root -> slot, parent, who
 * announced it first, its raw event data, payload evidence), the ancestry walks over it,
 * and the parent fetches that fill its gaps (see head.c and head_int.h).
 */
#include "cluster/head_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"

/* ---- block knowledge ---------------------------------------------------------------- */

static uint32_t hash_root(const bm_head_t *t, const uint8_t r[32])
{
    /* Keyed so that a node cannot pick roots that collide in the table. */
    uint64_t h = t->seed;
    for (int i = 0; i < 32; i += 8) {
        uint64_t w;
        memcpy(&w, r + i, 8);
        h ^= w;
        h *= 0x9e3779b97f4a7c15ull;
        h ^= h >> 29;
    }
    return (uint32_t)(h ^ (h >> 32));
}

int32_t bm_hd_blk_find(const bm_head_t *t, const uint8_t r[32])
{
    uint32_t i = hash_root(t, r) & t->imask;
    for (;;) {
        int32_t v = t->idx[i];
        if (v == 0)
            return -1;
        if (eq(t->blk[v - 1].root, r))
            return v - 1;
        i = (i + 1) & t->imask;
    }
}

static void idx_insert(bm_head_t *t, uint32_t bi)
{
    uint32_t i = hash_root(t, t->blk[bi].root) & t->imask;
    while (t->idx[i] != 0)
        i = (i + 1) & t->imask;
    t->idx[i] = (int32_t)bi + 1;
}

void bm_hd_blk_release(bm_head_t *t, blk_t *b)
{
    for (int k = 0; k < BM_HEAD_TOPIC_COUNT; k++)
        bm_buf_unref(b->raw[k]);
    bm_buf_unref(b->raw_full);
    if (b->pstate == P_ASKING && b->asking >= 0 && t->nodes[b->asking].inflight > 0)
        t->nodes[b->asking].inflight--;
}

typedef struct seen_ix {
    uint64_t seen;
    uint32_t i;
} seen_ix_t;

static int cmp_seen(const void *a, const void *b)
{
    const seen_ix_t *x = a, *y = b;
    if (x->seen != y->seen)
        return x->seen < y->seen ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/*
 * Drops old knowledge. Protected: the cluster head and its ancestors (at most cap/4 of
 * them, keep_epochs back from the head) and every node's head. Unprotected entries go when older
 * than keep_epochs below the clock; with `force` (the table is full), the oldest first-seen ones
 * also go until the table is three quarters full. Protected entries are at most cap/4 + n + 1 < 3/4
 * cap (cap >= 4n + 64), so a forced prune always frees room.
 */
void bm_hd_prune(bm_head_t *t, bool force)
{
    for (uint32_t i = 0; i < t->nblk; i++)
        t->blk[i].mark = false;
    if (t->has_head) {
        uint64_t keep = t->clock_known ? keep_slots(t) : 0;
        uint64_t low = t->head_slot > keep ? t->head_slot - keep : 0;
        int32_t cur = bm_hd_blk_find(t, t->head);
        for (uint32_t steps = 0; cur >= 0 && steps < t->cap / 4; steps++) {
            if (steps > 0 && t->blk[cur].slot_known && t->blk[cur].slot < low)
                break;
            t->blk[cur].mark = true;
            if (t->blk[cur].pstate != P_KNOWN)
                break;
            cur = bm_hd_blk_find(t, t->blk[cur].parent);
        }
    }
    for (size_t v = 0; v < t->n; v++) {
        if (!t->nodes[v].has_head)
            continue;
        int32_t i = bm_hd_blk_find(t, t->nodes[v].root);
        if (i >= 0)
            t->blk[i].mark = true;
    }
    uint64_t floor = 0, unslotted_floor_ms = 0;
    if (t->clock_known) {
        /* Counted back from the older of the clock and the cluster head: while the head
         * lags (no quorum), what the rules walk from it must stay. */
        uint64_t ref = bm_slot_at(&t->clock, t->now);
        if (t->has_head && t->head_slot < ref)
            ref = t->head_slot;
        floor = ref > keep_slots(t) ? ref - keep_slots(t) : 0;
        uint64_t age = keep_slots(t) * t->clock.slot_ms;
        unslotted_floor_ms = t->now > age ? t->now - age : 0;
    }
    bool *drop = calloc(t->nblk ? t->nblk : 1, sizeof *drop);
    seen_ix_t *order = force ? calloc(t->nblk ? t->nblk : 1, sizeof *order) : NULL;
    if (!drop || (force && !order)) {
        free(drop);
        free(order);
        return; /* nothing dropped: the caller copes with a full table */
    }
    uint32_t kept = t->nblk, norder = 0;
    for (uint32_t i = 0; i < t->nblk; i++) {
        blk_t *b = &t->blk[i];
        if (b->mark)
            continue;
        bool old = b->slot_known ? b->slot < floor : b->first_seen_ms < unslotted_floor_ms;
        if (old) {
            drop[i] = true;
            kept--;
        } else if (order) {
            order[norder].seen = b->used_ms;
            order[norder].i = i;
            norder++;
        }
    }
    if (force && kept > t->cap - t->cap / 4) {
        qsort(order, norder, sizeof *order, cmp_seen);
        for (uint32_t k = 0; k < norder && kept > t->cap - t->cap / 4; k++) {
            drop[order[k].i] = true;
            kept--;
        }
    }
    uint32_t w = 0;
    for (uint32_t i = 0; i < t->nblk; i++) {
        if (drop[i]) {
            bm_hd_blk_release(t, &t->blk[i]);
            t->stats.pruned++;
            continue;
        }
        if (w != i)
            t->blk[w] = t->blk[i];
        w++;
    }
    t->nblk = w;
    memset(t->idx, 0, (size_t)(t->imask + 1) * sizeof *t->idx);
    for (uint32_t i = 0; i < t->nblk; i++)
        idx_insert(t, i);
    free(drop);
    free(order);
}

/*
 * Finds `root`, or creates it (slot may be SLOT_UNKNOWN for a parent known only by its
 * root). May prune, which moves entries: returns an index, valid until the next create.
 * -1 when absent and `create` is false, or when the table cannot take it.
 */
int32_t bm_hd_blk_get(bm_head_t *t, const uint8_t root[32], uint64_t slot, bool create,
                      uint64_t seen_ms)
{
    int32_t i = bm_hd_blk_find(t, root);
    if (i >= 0) {
        blk_t *b = &t->blk[i];
        if (!b->slot_known && slot != SLOT_UNKNOWN) {
            b->slot = slot;
            b->slot_known = true;
        }
        if (seen_ms < b->first_seen_ms)
            b->first_seen_ms = seen_ms;
        if (t->now > b->used_ms)
            b->used_ms = t->now;
        return i;
    }
    if (!create)
        return -1;
    if (t->nblk >= t->cap)
        bm_hd_prune(t, true);
    if (t->nblk >= t->cap)
        return -1;
    blk_t *b = &t->blk[t->nblk];
    memset(b, 0, sizeof *b);
    memcpy(b->root, root, 32);
    b->slot = slot == SLOT_UNKNOWN ? 0 : slot;
    b->slot_known = slot != SLOT_UNKNOWN;
    b->parent_slot = SLOT_UNKNOWN;
    b->first_seen_ms = seen_ms;
    b->used_ms = t->now;
    b->first_node = b->first_voter = b->asking = -1;
    idx_insert(t, t->nblk);
    return (int32_t)t->nblk++;
}

/* ---- ancestry ----------------------------------------------------------------------- */

/*
 * Is `a` (at a_slot) a strict ancestor of `d`? Follows d's known parent links; YES, NO
 * (the chain passed below a_slot without meeting it), or UNK (a link is missing).
 * `crossed` (may be NULL) is set when an abandoned entry lies strictly between them.
 * On UNK, `pending` (may be NULL) says whether the missing header is being fetched now.
 */
int bm_hd_is_anc_ex(const bm_head_t *t, const uint8_t a[32], uint64_t a_slot, const uint8_t d[32],
                    bool *crossed, bool *pending)
{
    if (pending)
        *pending = false;
    if (eq(a, d))
        return NO;
    int32_t cur = bm_hd_blk_find(t, d);
    for (uint32_t steps = 0; steps <= t->cap; steps++) {
        if (cur < 0)
            return UNK;
        const blk_t *b = &t->blk[cur];
        if (b->slot_known && b->slot <= a_slot)
            return NO;
        if (b->pstate != P_KNOWN) {
            if (pending)
                *pending = b->pstate == P_ASKING;
            return UNK;
        }
        if (eq(b->parent, a))
            return YES;
        int32_t p = bm_hd_blk_find(t, b->parent);
        if (p < 0 || !t->blk[p].slot_known) {
            if (b->parent_slot != SLOT_UNKNOWN && b->parent_slot <= a_slot)
                return NO; /* its parent, not `a`, is at or below a's slot */
            if (pending && p >= 0)
                *pending = t->blk[p].pstate == P_ASKING;
            return UNK;
        }
        if (t->blk[p].slot <= a_slot)
            return NO;
        if (crossed && t->blk[p].abandoned)
            *crossed = true;
        cur = p;
    }
    return UNK;
}

int bm_hd_is_anc(const bm_head_t *t, const uint8_t a[32], uint64_t a_slot, const uint8_t d[32],
                 bool *crossed)
{
    return bm_hd_is_anc_ex(t, a, a_slot, d, crossed, NULL);
}

/* The slot to judge a root by: the table's (first claim or header) else the given one. */
uint64_t bm_hd_root_slot(const bm_head_t *t, const uint8_t root[32], uint64_t fallback)
{
    int32_t i = bm_hd_blk_find(t, root);
    return i >= 0 && t->blk[i].slot_known ? t->blk[i].slot : fallback;
}

/*
 * `r` compared with the cluster head. On BM_HEAD_REL_UNKNOWN, `pending` (may be NULL)
 * says whether the header that would decide it is being fetched now: the rules then
 * wait for it rather than act on ignorance.
 */
bm_head_relation_t bm_hd_relation_ex(const bm_head_t *t, const uint8_t r[32], uint64_t r_slot,
                                     bool *crossed, bool *pending)
{
    if (pending)
        *pending = false;
    if (!t->has_head)
        return BM_HEAD_REL_NONE;
    if (eq(r, t->head))
        return BM_HEAD_REL_EQUAL;
    int res;
    if (r_slot < t->head_slot) {
        res = bm_hd_is_anc_ex(t, r, r_slot, t->head, NULL, pending);
        return res == YES  ? BM_HEAD_REL_ANCESTOR
               : res == NO ? BM_HEAD_REL_OFF
                           : BM_HEAD_REL_UNKNOWN;
    }
    if (r_slot > t->head_slot) {
        res = bm_hd_is_anc_ex(t, t->head, t->head_slot, r, crossed, pending);
        return res == YES  ? BM_HEAD_REL_DESCENDANT
               : res == NO ? BM_HEAD_REL_OFF
                           : BM_HEAD_REL_UNKNOWN;
    }
    return BM_HEAD_REL_OFF; /* two blocks at one slot */
}

bm_head_relation_t bm_hd_relation(const bm_head_t *t, const uint8_t r[32], uint64_t r_slot,
                                  bool *crossed)
{
    return bm_hd_relation_ex(t, r, r_slot, crossed, NULL);
}

bool bm_hd_common_ancestor(const bm_head_t *t, const uint8_t x[32], const uint8_t y[32],
                           uint8_t out[32], uint64_t *out_slot)
{
    int32_t a = bm_hd_blk_find(t, x), b = bm_hd_blk_find(t, y);
    for (uint32_t steps = 0; steps <= 2 * t->cap; steps++) {
        if (a < 0 || b < 0 || !t->blk[a].slot_known || !t->blk[b].slot_known)
            return false;
        if (a == b) {
            memcpy(out, t->blk[a].root, 32);
            *out_slot = t->blk[a].slot;
            return true;
        }
        int32_t *step = t->blk[a].slot >= t->blk[b].slot ? &a : &b;
        if (t->blk[*step].pstate != P_KNOWN)
            return false;
        *step = bm_hd_blk_find(t, t->blk[*step].parent);
    }
    return false;
}

/* ---- parents ------------------------------------------------------------------------ */

/* Does node v hold `root` (its head, or an ancestor of its head)? */
static bool holds(const bm_head_t *t, const node_t *v, const uint8_t root[32], uint64_t slot)
{
    if (!v->has_head)
        return false;
    if (eq(v->root, root))
        return true;
    return bm_hd_is_anc(t, root, slot == SLOT_UNKNOWN ? 0 : slot, v->root, NULL) == YES;
}

/*
 * Asks for `root`'s header from `pref` if it may, else from another node holding it.
 * Each node is asked once; with `retry` (links of the cluster chain, which block roots
 * at slots and so duties' dependent roots rest on), a root every holder failed to give
 * is asked again from the next slot on (within the per-node budgets): a passing outage
 * must not leave the cluster chain unknown for good.
 */
void bm_hd_want(bm_head_t *t, const uint8_t root_in[32], uint64_t slot, size_t pref, bool retry)
{
    if (!t->fetch)
        return;
    uint8_t root[32];
    memcpy(root, root_in, 32);
    int32_t i = bm_hd_blk_get(t, root, slot, true, t->now);
    if (i < 0 || t->blk[i].pstate != P_UNKNOWN)
        return;
    uint64_t bslot = t->blk[i].slot_known ? t->blk[i].slot : SLOT_UNKNOWN;
    size_t pick = t->n;
    for (int round = 0; round < 2 && pick == t->n; round++) {
        uint64_t asked = t->blk[i].asked_mask;
        if (round == 1) {
            if (!retry || asked == 0 ||
                bm_slot_at(&t->clock, t->blk[i].asked_at_ms) >= bm_slot_at(&t->clock, t->now))
                break;
            t->blk[i].asked_mask = asked = 0; /* every holder failed a slot ago or more */
        }
        if (!(asked & (1ull << pref)) && askable(t, &t->nodes[pref]))
            pick = pref;
        for (size_t v = 0; pick == t->n && v < t->n; v++)
            if (!(asked & (1ull << v)) && askable(t, &t->nodes[v]) &&
                holds(t, &t->nodes[v], root, bslot))
                pick = v;
    }
    if (pick == t->n)
        return;
    blk_t *b = &t->blk[i];
    b->pstate = P_ASKING;
    b->asking = (int16_t)pick;
    b->asked_mask |= 1ull << pick;
    b->asked_at_ms = t->now;
    node_t *np = &t->nodes[pick];
    uint64_t now_slot = bm_slot_at(&t->clock, t->now);
    if (np->budget_slot != now_slot) {
        np->budget_slot = now_slot;
        np->fetch_count = 0;
    }
    np->fetch_count++;
    np->inflight++;
    t->stats.fetches++;
    note_t n = {.kind = N_FETCH};
    memcpy(n.u.fetch.root, root, 32);
    n.u.fetch.slot = bslot;
    n.u.fetch.node = pick;
    bm_hd_push(t, &n);
}

/*
 * Caches block i's parent's slot in i when the parent's entry is at hand. Returns true
 * when the parent's entry exists (the walk may go on to it).
 */
static bool note_parent_slot(bm_head_t *t, int32_t i)
{
    int32_t p = bm_hd_blk_find(t, t->blk[i].parent);
    if (p < 0 || !t->blk[p].slot_known)
        return false;
    t->blk[i].parent_slot = t->blk[p].slot;
    return true;
}

/*
 * Asks for what the rules miss: for each askable node whose head is not on the cluster
 * chain at or behind the head, the first missing link of its chain (extension, forked
 * and reorg-depth judgements need it) down to where it meets the cluster chain; for the
 * cluster head, its ancestry chase_epochs back (block roots at slots, relations of
 * lagging nodes). One link per chain per decision: each answer asks for the next.
 */
void bm_hd_request_parents(bm_head_t *t)
{
    if (!t->fetch || !t->clock_known)
        return;
    uint64_t chase = (uint64_t)t->o.chase_epochs * t->clock.slots_per_epoch;
    uint64_t target = t->has_head && t->head_slot > chase ? t->head_slot - chase : 0;
    uint64_t nfloor =
        t->has_head && t->head_slot > keep_slots(t) ? t->head_slot - keep_slots(t) : 0;
    for (size_t v = 0; v < t->n; v++) {
        node_t *nv = &t->nodes[v];
        if (!nv->has_head || nv->stale || !askable(t, nv))
            continue;
        bm_head_relation_t rel =
            bm_hd_relation(t, nv->root, bm_hd_root_slot(t, nv->root, nv->slot), NULL);
        if (rel == BM_HEAD_REL_EQUAL || rel == BM_HEAD_REL_ANCESTOR)
            continue;
        uint8_t cur[32];
        memcpy(cur, nv->root, 32);
        for (int links = 0; links < CHASE_LINKS; links++) {
            if (t->has_head && eq(cur, t->head))
                break;
            int32_t i = bm_hd_blk_find(t, cur);
            if (i < 0) {
                bm_hd_want(t, cur, SLOT_UNKNOWN, v, false);
                break;
            }
            blk_t *b = &t->blk[i];
            b->used_ms = t->now;
            if (t->has_head && b->slot_known &&
                (b->slot < nfloor ||
                 (b->slot <= t->head_slot && bm_hd_is_anc(t, cur, b->slot, t->head, NULL) == YES)))
                break; /* met the cluster chain, or as far back as knowledge is kept */
            if (b->pstate != P_KNOWN) {
                bm_hd_want(t, cur, SLOT_UNKNOWN, v, false);
                break;
            }
            if (!t->has_head)
                break; /* before the first head only the heads' own parents matter */
            if (!note_parent_slot(t, i) && t->blk[i].parent_slot != SLOT_UNKNOWN &&
                t->blk[i].parent_slot < nfloor)
                break; /* the parent is older than what is kept: never ask for it again */
            memcpy(cur, t->blk[i].parent, 32);
        }
    }
    if (!t->has_head)
        return;
    size_t holder = t->n;
    for (size_t v = 0; v < t->n && holder == t->n; v++)
        if (t->nodes[v].has_head && !t->nodes[v].stale &&
            (eq(t->nodes[v].root, t->head) ||
             bm_hd_is_anc(t, t->head, t->head_slot, t->nodes[v].root, NULL) == YES) &&
            askable(t, &t->nodes[v]))
            holder = v;
    if (holder == t->n)
        return;
    uint8_t cur[32];
    memcpy(cur, t->head, 32);
    for (uint32_t steps = 0; steps <= t->cap; steps++) {
        int32_t i = bm_hd_blk_find(t, cur);
        if (i < 0) {
            bm_hd_want(t, cur, SLOT_UNKNOWN, holder, true);
            return;
        }
        blk_t *b = &t->blk[i];
        b->used_ms = t->now;
        if (b->slot_known && b->slot <= target)
            return;
        if (b->pstate != P_KNOWN) {
            bm_hd_want(t, cur, SLOT_UNKNOWN, holder, true);
            return;
        }
        if (!note_parent_slot(t, i) && t->blk[i].parent_slot != SLOT_UNKNOWN &&
            t->blk[i].parent_slot <= target)
            return;
        memcpy(cur, t->blk[i].parent, 32);
    }
}
