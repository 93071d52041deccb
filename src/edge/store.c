/* SPDX-License-Identifier: MIT */
/*
 * store: chained hash table (SipHash under a per-store random key, so that client-chosen
 * keys cannot pile into one bucket) and a doubly linked LRU list, most recent at the head.
 */
#include "edge/store.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/err.h"
#include "base/json.h"

#define ENTRY_OVERHEAD 256 /* the entry struct, its key and fields, counted per entry */

struct bm_store {
    bm_entry_t **buckets;
    size_t n_buckets; /* power of two */
    size_t count;
    uint64_t bytes;
    size_t max_entries;
    uint64_t max_bytes;
    bm_link_t lru; /* entries (bm_entry_t.lru), most recently used first */
    uint8_t hkey[16];
    bm_store_stats_t st;
};

bm_store_t *bm_store_new(size_t max_entries, uint64_t max_bytes)
{
    bm_store_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    bm_link_init(&s->lru);
    s->max_entries = max_entries ? max_entries : 1;
    s->max_bytes = max_bytes;
    s->n_buckets = 64;
    s->buckets = calloc(s->n_buckets, sizeof *s->buckets);
    if (!s->buckets) {
        free(s);
        return NULL;
    }
    if (getrandom(s->hkey, sizeof s->hkey, 0) != (ssize_t)sizeof s->hkey)
        memset(s->hkey, 0x5a, sizeof s->hkey); /* still a working table */
    return s;
}

bm_entry_t *bm_entry_new(const char *key, size_t n, bm_buf_t *body, bm_buf_t *gz)
{
    bm_entry_t *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->key = malloc(n + 1);
    if (!e->key) {
        free(e);
        return NULL;
    }
    memcpy(e->key, key, n);
    e->key[n] = '\0';
    e->key_len = n;
    e->body = bm_buf_ref(body);
    e->gz = gz ? bm_buf_ref(gz) : NULL;
    bm_hdrs_init(&e->hdrs);
    bm_hdrs_init(&e->hdrs_gz);
    e->flags.finalized_off = e->flags.optimistic_off = -1;
    e->slot = UINT64_MAX;
    bm_link_init(&e->lru);
    return e;
}

void bm_entry_free(bm_entry_t *e)
{
    if (!e)
        return;
    bm_buf_unref(e->body);
    bm_buf_unref(e->gz);
    bm_hdrs_dispose(&e->hdrs);
    bm_hdrs_dispose(&e->hdrs_gz);
    free(e->key);
    free(e);
}

void bm_store_free(bm_store_t *s)
{
    if (!s)
        return;
    bm_link_t *l, *nx;
    bm_list_for_each_safe (l, nx, &s->lru)
        bm_entry_free(bm_list_entry(l, bm_entry_t, lru));
    free(s->buckets);
    free(s);
}

static size_t entry_bytes(const bm_entry_t *e)
{
    size_t n = /* allocated, not only used */
        ENTRY_OVERHEAD + e->key_len + (e->body ? e->body->cap : 0) + (e->gz ? e->gz->cap : 0);
    for (size_t i = 0; i < e->hdrs.n; i++)
        n += 2 * (e->hdrs.items[i].name_len + e->hdrs.items[i].value_len + 2); /* and _gz */
    return n;
}

/* ---- the table ------------------------------------------------------------------------ */

static bm_entry_t **slot_of(bm_store_t *s, uint64_t h, const char *key, size_t n)
{
    bm_entry_t **p = &s->buckets[h & (s->n_buckets - 1)];
    while (*p && !((*p)->hash == h && (*p)->key_len == n && memcmp((*p)->key, key, n) == 0))
        p = &(*p)->next_in_bucket;
    return p;
}

static void unlink_entry(bm_store_t *s, bm_entry_t *e)
{
    bm_entry_t **p = slot_of(s, e->hash, e->key, e->key_len);
    if (*p == e)
        *p = e->next_in_bucket;
    bm_link_unlink(&e->lru);
    s->count--;
    s->bytes -= e->bytes;
}

static void drop(bm_store_t *s, bm_entry_t *e)
{
    unlink_entry(s, e);
    bm_entry_free(e);
}

/* Doubles the buckets when the table is fuller than one entry per bucket. */
static void maybe_grow(bm_store_t *s)
{
    if (s->count < s->n_buckets || s->n_buckets >= ((size_t)1 << 30))
        return;
    size_t nb = s->n_buckets * 2;
    bm_entry_t **b = calloc(nb, sizeof *b);
    if (!b)
        return; /* longer chains, still correct */
    for (size_t i = 0; i < s->n_buckets; i++) {
        for (bm_entry_t *e = s->buckets[i], *nx; e; e = nx) {
            nx = e->next_in_bucket;
            e->next_in_bucket = b[e->hash & (nb - 1)];
            b[e->hash & (nb - 1)] = e;
        }
    }
    free(s->buckets);
    s->buckets = b;
    s->n_buckets = nb;
}

bm_entry_t *bm_store_get(bm_store_t *s, const char *key, size_t n, uint64_t now_ms)
{
    uint64_t h = bm_json_siphash(s->hkey, key, n);
    bm_entry_t *e = *slot_of(s, h, key, n);
    if (!e)
        return NULL;
    if (e->expires_ms && now_ms >= e->expires_ms) {
        s->st.expirations++;
        drop(s, e);
        return NULL;
    }
    bm_link_unlink(&e->lru);
    bm_list_push_front(&s->lru, &e->lru);
    return e;
}

void bm_store_update(bm_store_t *s, bm_entry_t *e, bm_buf_t *body, bm_buf_t *gz)
{
    bm_buf_t *ob = e->body, *og = e->gz;
    e->body = bm_buf_ref(body);
    e->gz = gz ? bm_buf_ref(gz) : NULL;
    bm_buf_unref(ob);
    bm_buf_unref(og);
    s->bytes -= e->bytes;
    e->bytes = entry_bytes(e);
    s->bytes += e->bytes;
}

void bm_store_remove(bm_store_t *s, const char *key, size_t n)
{
    uint64_t h = bm_json_siphash(s->hkey, key, n);
    bm_entry_t *e = *slot_of(s, h, key, n);
    if (e)
        drop(s, e);
}

int bm_store_put(bm_store_t *s, bm_entry_t *e)
{
    e->bytes = entry_bytes(e);
    if (e->bytes > s->max_bytes) {
        s->st.refused++;
        bm_entry_free(e);
        return BM_ETOOBIG;
    }
    e->hash = bm_json_siphash(s->hkey, e->key, e->key_len);
    bm_entry_t *old = *slot_of(s, e->hash, e->key, e->key_len);
    if (old)
        drop(s, old);
    while (!bm_list_empty(&s->lru) &&
           (s->count + 1 > s->max_entries || s->bytes + e->bytes > s->max_bytes)) {
        bm_entry_t *victim = bm_list_last(&s->lru, bm_entry_t, lru);
        s->st.evictions[victim->route]++;
        drop(s, victim);
    }
    bm_entry_t **p = &s->buckets[e->hash & (s->n_buckets - 1)];
    e->next_in_bucket = *p;
    *p = e;
    bm_list_push_front(&s->lru, &e->lru);
    s->count++;
    s->bytes += e->bytes;
    maybe_grow(s);
    return 0;
}

void bm_store_promote(bm_store_t *s, uint64_t final_slot,
                      bool (*canonical)(void *ud, const uint8_t root[32], uint64_t slot), void *ud)
{
    bm_link_t *l, *nx;
    bm_list_for_each_safe (l, nx, &s->lru) {
        bm_entry_t *e = bm_list_entry(l, bm_entry_t, lru);
        if (e->cls != BM_CK_CHAIN || !e->has_root || e->slot > final_slot)
            continue;
        if (canonical(ud, e->root, e->slot)) {
            e->cls = BM_CK_IMMUTABLE;
            e->final = true;
            e->expires_ms = 0;
            s->st.promotions++;
        } else {
            s->st.orphans_dropped++;
            drop(s, e);
        }
    }
}

size_t bm_store_count(const bm_store_t *s)
{
    return s->count;
}

uint64_t bm_store_bytes(const bm_store_t *s)
{
    return s->bytes;
}

const bm_store_stats_t *bm_store_stats(const bm_store_t *s)
{
    return &s->st;
}

void bm_store_class_counts(const bm_store_t *s, size_t out[4])
{
    memset(out, 0, 4 * sizeof out[0]);
    for (const bm_link_t *l = s->lru.next; l != &s->lru; l = l->next)
        out[bm_list_entry(l, const bm_entry_t, lru)->cls & 3]++;
}
