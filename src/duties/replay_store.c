/* SPDX-License-Identifier: MIT */
/*
 * replay_store: the replay memory's tables (see replay.c): entries of a fixed size in one array,
 * an open-addressing index over their keys, and a list of the entries in the order they were
 * last submitted, so that a full table makes room by dropping the least recently submitted
 * entry in constant time (not by refusing the newest: whoever fills the memory first would
 * keep it).
 */
#include "duties/replay_int.h"

#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/defaults.h"
#include "base/err.h"
#include "base/json.h"
#include "base/log.h"
#include "base/ssz.h"
#include "base/url.h"

void *bm_rp_ent_at(const table_t *t, size_t i)
{
    return t->ents + i * t->stride;
}

static const uint8_t *key_of(const table_t *t, const void *e)
{
    return (const uint8_t *)e + t->key_off;
}

static size_t hash_key(const table_t *t, const void *key)
{
    return (size_t)bm_json_siphash(HASH_KEY, key, t->key_len);
}

void bm_rp_table_init(table_t *t, size_t stride, size_t key_off, size_t key_len, size_t max_live,
                      void (*dispose)(void *))
{
    memset(t, 0, sizeof *t);
    t->stride = stride;
    t->key_off = key_off;
    t->key_len = key_len;
    t->max_live = max_live;
    t->dispose = dispose;
}

void bm_rp_table_dispose(table_t *t)
{
    if (t->dispose)
        for (size_t i = 0; i < t->n_ents; i++) {
            ehdr_t *h = bm_rp_ent_at(t, i);
            if (h->live)
                t->dispose(h);
        }
    free(t->ents);
    free(t->idx);
    free(t->holes);
    memset(t, 0, sizeof *t);
}

/* ---- the submission order: a doubly linked list through the entries, oldest first ---------- */

static ehdr_t *at_link(const table_t *t, uint32_t link)
{
    return bm_rp_ent_at(t, link - 1);
}

static void order_unlink(table_t *t, ehdr_t *h, uint32_t self)
{
    if (h->prev)
        at_link(t, h->prev)->next = h->next;
    else if (t->oldest == self)
        t->oldest = h->next;
    if (h->next)
        at_link(t, h->next)->prev = h->prev;
    else if (t->newest == self)
        t->newest = h->prev;
    h->prev = h->next = 0;
}

static void order_append(table_t *t, ehdr_t *h, uint32_t self)
{
    h->prev = t->newest;
    h->next = 0;
    if (t->newest)
        at_link(t, t->newest)->next = self;
    else
        t->oldest = self;
    t->newest = self;
}

static uint32_t link_of(const table_t *t, const void *e)
{
    return (uint32_t)((size_t)((const uint8_t *)e - t->ents) / t->stride + 1);
}

/* Index slot holding the key, or the empty slot where it would go. */
static size_t idx_probe(const table_t *t, const void *key, bool *found)
{
    size_t mask = t->idx_cap - 1;
    size_t i = hash_key(t, key) & mask;
    for (;;) {
        uint32_t v = t->idx[i];
        if (!v) {
            *found = false;
            return i;
        }
        if (memcmp(key_of(t, bm_rp_ent_at(t, v - 1)), key, t->key_len) == 0) {
            *found = true;
            return i;
        }
        i = (i + 1) & mask;
    }
}

/* Fills a fresh index with every live entry. */
static void idx_fill(table_t *t)
{
    for (size_t i = 0; i < t->n_ents; i++) {
        ehdr_t *h = bm_rp_ent_at(t, i);
        if (!h->live)
            continue;
        bool found;
        size_t s = idx_probe(t, key_of(t, h), &found);
        t->idx[s] = (uint32_t)(i + 1);
    }
}

static int idx_rebuild(table_t *t, size_t cap)
{
    uint32_t *idx = calloc(cap, sizeof *idx);
    if (!idx)
        return BM_ENOMEM;
    free(t->idx);
    t->idx = idx;
    t->idx_cap = cap;
    idx_fill(t);
    return 0;
}

void *bm_rp_table_find(const table_t *t, const void *key)
{
    if (!t->idx_cap)
        return NULL;
    bool found;
    size_t s = idx_probe(t, key, &found);
    return found ? bm_rp_ent_at(t, t->idx[s] - 1) : NULL;
}

/* The entry for `key`, now the most recently submitted. When absent it is created zeroed
 * (live, key set) if `may_create`, first dropping the least recently submitted entry when the
 * table is at its cap (counted in `evicted`); NULL when absent and not `may_create`, or when
 * memory ran out (*created tells whether it was created). */
void *bm_rp_table_upsert(table_t *t, const void *key, bool may_create, bool *created)
{
    *created = false;
    void *e = bm_rp_table_find(t, key);
    if (e) {
        uint32_t self = link_of(t, e);
        order_unlink(t, e, self);
        order_append(t, e, self);
        return e;
    }
    if (!may_create)
        return NULL;
    if (t->live >= t->max_live && t->oldest) {
        bm_rp_table_remove(t, at_link(t, t->oldest));
        t->evicted++;
    }
    if (t->live >= t->max_live)
        return NULL;
    if ((t->live + 1) * 4 > t->idx_cap * 3 && idx_rebuild(t, t->idx_cap ? t->idx_cap * 2 : 64) != 0)
        return NULL;
    size_t pos;
    if (t->n_holes && !t->cursors) {
        pos = t->holes[--t->n_holes];
    } else {
        if (t->n_ents == t->cap_ents) {
            size_t cap = t->cap_ents ? t->cap_ents * 2 : 64;
            if (cap > 2 * t->max_live + 64)
                cap = 2 * t->max_live + 64;
            if (cap <= t->n_ents)
                return NULL; /* only holes left, and a replay is walking: rare, dropped */
            uint8_t *ents = realloc(t->ents, cap * t->stride);
            if (!ents)
                return NULL;
            t->ents = ents;
            t->cap_ents = cap;
        }
        pos = t->n_ents++;
    }
    e = bm_rp_ent_at(t, pos);
    memset(e, 0, t->stride);
    memcpy((uint8_t *)e + t->key_off, key, t->key_len);
    ((ehdr_t *)e)->live = true;
    bool found;
    size_t s = idx_probe(t, key, &found);
    t->idx[s] = (uint32_t)(pos + 1);
    order_append(t, e, (uint32_t)(pos + 1));
    t->live++;
    t->fed_new++;
    *created = true;
    return e;
}

void bm_rp_table_remove(table_t *t, void *e)
{
    ehdr_t *h = e;
    if (!h->live)
        return;
    bool found;
    size_t i = idx_probe(t, key_of(t, e), &found);
    bm_assert(found);
    /* backward-shift deletion: pull later members of the probe run into the gap */
    size_t mask = t->idx_cap - 1;
    size_t j = i;
    t->idx[i] = 0;
    for (;;) {
        j = (j + 1) & mask;
        uint32_t v = t->idx[j];
        if (!v)
            break;
        size_t k = hash_key(t, key_of(t, bm_rp_ent_at(t, v - 1))) & mask;
        bool between = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (between)
            continue;
        t->idx[i] = v;
        t->idx[j] = 0;
        i = j;
    }
    order_unlink(t, h, link_of(t, e));
    if (t->dispose)
        t->dispose(e);
    h->live = false;
    t->live--;
    size_t pos = (size_t)((uint8_t *)e - t->ents) / t->stride;
    if (pos + 1 == t->n_ents && !t->cursors) {
        t->n_ents--;
        return;
    }
    size_t *holes = bm_grow(t->holes, t->n_holes, &t->cap_holes, sizeof *holes, 64);
    if (!holes)
        return; /* the hole stays unused until the next compaction */
    t->holes = holes;
    t->holes[t->n_holes++] = pos;
}

/* Moves the live entries together (only while no replay walks the table), keeping their
 * submission order. The new index and the map of moves are allocated first, so that running
 * out of memory leaves the table as it was. */
void bm_rp_table_compact(table_t *t)
{
    if (t->cursors || t->n_ents == t->live || !t->idx_cap)
        return;
    uint32_t *idx = calloc(t->idx_cap, sizeof *idx);
    uint32_t *moved = malloc((t->n_ents + 1) * sizeof *moved); /* old link -> new link */
    if (!idx || !moved) {
        free(idx);
        free(moved);
        return;
    }
    moved[0] = 0;
    size_t w = 0;
    for (size_t i = 0; i < t->n_ents; i++) {
        ehdr_t *h = bm_rp_ent_at(t, i);
        moved[i + 1] = 0;
        if (!h->live)
            continue;
        if (w != i)
            memcpy(bm_rp_ent_at(t, w), h, t->stride);
        moved[i + 1] = (uint32_t)(++w);
    }
    for (size_t i = 0; i < w; i++) {
        ehdr_t *h = bm_rp_ent_at(t, i);
        h->prev = moved[h->prev];
        h->next = moved[h->next];
    }
    t->oldest = moved[t->oldest];
    t->newest = moved[t->newest];
    free(moved);
    t->n_ents = w;
    t->n_holes = 0;
    free(t->idx);
    t->idx = idx;
    idx_fill(t);
}

void bm_rp_ssub_dispose(void *e)
{
    ssub_e *s = e;
    free(s->idx);
    s->idx = NULL;
    s->n_idx = 0;
}
