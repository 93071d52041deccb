/* SPDX-License-Identifier: MIT */
/*
 * checkpoints: the nodes' source and target checkpoints per epoch, and their agreement (see
 * checkpoints.h).
 *
 * How it is built: a fixed table of the four newest epochs seen, each with the pairs its
 * answers carried (a few nodes on a few chains: 16 pairs at most, more are not counted) as
 * a bit set of the nodes that answered each, and the pairs served before an agreement
 * existed (8 at most). No allocation after the book itself: an answer costs a few
 * comparisons of 80 bytes.
 */
#include "duties/checkpoints.h"

#include <stdlib.h>
#include <string.h>

#include "base/defaults.h"

_Static_assert(BM_MAX_NODES <= 64, "the node sets are 64-bit masks");

#define EPOCHS 4
#define PAIRS 16
#define SERVED 8

typedef struct pair_rec {
    bm_checkpoint_pair_t pair;
    uint64_t nodes; /* bit i: node i answered this pair */
    bool agreed;
} pair_rec_t;

typedef struct served_rec {
    bm_checkpoint_pair_t pair;
    bool reported;
} served_rec_t;

typedef struct epoch_rec {
    bool used;
    uint64_t epoch;
    pair_rec_t pairs[PAIRS];
    size_t n_pairs;
    served_rec_t served[SERVED];
    size_t n_served;
    bool agreed; /* some pair of the epoch is agreed */
} epoch_rec_t;

struct bm_checkpoints {
    epoch_rec_t epochs[EPOCHS];
};

static bool checkpoint_equal(const bm_checkpoint_t *a, const bm_checkpoint_t *b)
{
    return a->epoch == b->epoch && memcmp(a->root, b->root, 32) == 0;
}

bool bm_checkpoint_pair_equal(const bm_checkpoint_pair_t *a, const bm_checkpoint_pair_t *b)
{
    return checkpoint_equal(&a->source, &b->source) && checkpoint_equal(&a->target, &b->target);
}

bm_checkpoints_t *bm_checkpoints_new(void)
{
    return calloc(1, sizeof(bm_checkpoints_t));
}

void bm_checkpoints_free(bm_checkpoints_t *b)
{
    free(b);
}

static epoch_rec_t *find_epoch(const bm_checkpoints_t *b, uint64_t epoch)
{
    for (size_t i = 0; i < EPOCHS; i++)
        if (b->epochs[i].used && b->epochs[i].epoch == epoch)
            return (epoch_rec_t *)&b->epochs[i];
    return NULL;
}

/* The record of `epoch`, made in a free place or in place of the oldest epoch when that one
 * is older; NULL when `epoch` is older than every epoch kept. */
static epoch_rec_t *epoch_for(bm_checkpoints_t *b, uint64_t epoch)
{
    epoch_rec_t *e = find_epoch(b, epoch);
    if (e)
        return e;
    epoch_rec_t *slot = NULL;
    for (size_t i = 0; i < EPOCHS && !slot; i++)
        if (!b->epochs[i].used)
            slot = &b->epochs[i];
    if (!slot) {
        /* every place is taken: replace the oldest when it is older than `epoch` */
        epoch_rec_t *oldest = &b->epochs[0];
        for (size_t i = 1; i < EPOCHS; i++)
            if (b->epochs[i].epoch < oldest->epoch)
                oldest = &b->epochs[i];
        if (oldest->epoch >= epoch)
            return NULL;
        slot = oldest;
    }
    memset(slot, 0, sizeof *slot);
    slot->used = true;
    slot->epoch = epoch;
    return slot;
}

/* The agreed pair of `e` for the target root of `pair`, or NULL. */
static const pair_rec_t *agreed_for_target(const epoch_rec_t *e, const bm_checkpoint_pair_t *pair)
{
    for (size_t i = 0; i < e->n_pairs; i++)
        if (e->pairs[i].agreed && checkpoint_equal(&e->pairs[i].pair.target, &pair->target))
            return &e->pairs[i];
    return NULL;
}

static unsigned count_bits(uint64_t v)
{
    unsigned n = 0;
    for (; v; v &= v - 1)
        n++;
    return n;
}

size_t bm_checkpoints_note(bm_checkpoints_t *b, size_t node, const bm_checkpoint_pair_t *pair,
                           uint32_t quorum)
{
    if (!b || !pair || node >= BM_MAX_NODES)
        return 0;
    epoch_rec_t *e = epoch_for(b, pair->target.epoch);
    if (!e)
        return 0;
    pair_rec_t *p = NULL;
    for (size_t i = 0; i < e->n_pairs && !p; i++)
        if (bm_checkpoint_pair_equal(&e->pairs[i].pair, pair))
            p = &e->pairs[i];
    if (!p) {
        if (e->n_pairs == PAIRS)
            return 0; /* a pathological cluster: further pairs are not counted */
        p = &e->pairs[e->n_pairs++];
        memset(p, 0, sizeof *p);
        p->pair = *pair;
    }
    p->nodes |= 1ull << node;
    if (p->agreed || count_bits(p->nodes) < (quorum ? quorum : 1) || agreed_for_target(e, pair))
        return 0;
    p->agreed = true;
    e->agreed = true;
    size_t contradicted = 0;
    /* a served pair is contradicted by the new agreement when it names the same target with
     * another source, or another target that has no agreement of its own */
    for (size_t i = 0; i < e->n_served; i++) {
        served_rec_t *s = &e->served[i];
        if (s->reported || bm_checkpoint_pair_equal(&s->pair, pair))
            continue;
        if (!checkpoint_equal(&s->pair.target, &pair->target) && agreed_for_target(e, &s->pair))
            continue;
        s->reported = true;
        contradicted++;
    }
    return contradicted;
}

bool bm_checkpoints_epoch_agreed(const bm_checkpoints_t *b, uint64_t epoch)
{
    const epoch_rec_t *e = b ? find_epoch(b, epoch) : NULL;
    return e && e->agreed;
}

bool bm_checkpoints_agreed(const bm_checkpoints_t *b, const bm_checkpoint_pair_t *pair)
{
    const epoch_rec_t *e = b && pair ? find_epoch(b, pair->target.epoch) : NULL;
    const pair_rec_t *p = e ? agreed_for_target(e, pair) : NULL;
    return p && checkpoint_equal(&p->pair.source, &pair->source);
}

void bm_checkpoints_served(bm_checkpoints_t *b, const bm_checkpoint_pair_t *pair)
{
    if (!b || !pair)
        return;
    epoch_rec_t *e = epoch_for(b, pair->target.epoch);
    if (!e || e->agreed)
        return;
    for (size_t i = 0; i < e->n_served; i++)
        if (bm_checkpoint_pair_equal(&e->served[i].pair, pair))
            return;
    if (e->n_served < SERVED)
        e->served[e->n_served++] = (served_rec_t){.pair = *pair};
}
