/* SPDX-License-Identifier: MIT */
/*
 * sticky: the client-to-node table (see sticky.h). Linear probing in windows of PROBE
 * entries; key 0 marks a free entry (a real key of 0 is stored as 1).
 */
#include "read/sticky.h"

#include <stdlib.h>

#define PROBE 8

typedef struct entry {
    uint64_t key;
    uint64_t used_ms;
    int node;
} entry_t;

struct bm_sticky {
    entry_t *e;
    size_t mask;
    size_t count[BM_MAX_NODES];
    size_t total;
};

bm_sticky_t *bm_sticky_new(size_t cap)
{
    size_t n = 64;
    while (n < cap)
        n <<= 1;
    bm_sticky_t *s = calloc(1, sizeof *s);
    if (!s || !(s->e = calloc(n, sizeof *s->e))) {
        free(s);
        return NULL;
    }
    s->mask = n - 1;
    return s;
}

void bm_sticky_free(bm_sticky_t *s)
{
    if (!s)
        return;
    free(s->e);
    free(s);
}

static uint64_t fix(uint64_t key)
{
    return key ? key : 1;
}

static entry_t *find(bm_sticky_t *s, uint64_t key)
{
    for (size_t i = 0; i < PROBE; i++) {
        entry_t *e = &s->e[(key + i) & s->mask];
        if (e->key == key)
            return e;
    }
    return NULL;
}

int bm_sticky_get(bm_sticky_t *s, uint64_t key, uint64_t now_ms)
{
    entry_t *e = find(s, fix(key));
    if (!e)
        return -1;
    e->used_ms = now_ms;
    return e->node;
}

static void release(bm_sticky_t *s, entry_t *e)
{
    if (!e->key)
        return;
    s->count[e->node]--;
    s->total--;
    e->key = 0;
}

void bm_sticky_set(bm_sticky_t *s, uint64_t key, int node, uint64_t now_ms)
{
    if (node < 0 || node >= BM_MAX_NODES)
        return;
    key = fix(key);
    entry_t *e = find(s, key), *oldest = NULL;
    for (size_t i = 0; !e && i < PROBE; i++) {
        entry_t *c = &s->e[(key + i) & s->mask];
        if (!c->key) {
            e = c;
            break;
        }
        if (!oldest || c->used_ms < oldest->used_ms)
            oldest = c;
    }
    if (!e)
        e = oldest;
    release(s, e);
    e->key = key;
    e->node = node;
    e->used_ms = now_ms;
    s->count[node]++;
    s->total++;
}

void bm_sticky_drop(bm_sticky_t *s, uint64_t key)
{
    entry_t *e = find(s, fix(key));
    if (e)
        release(s, e);
}

void bm_sticky_each(const bm_sticky_t *s,
                    void (*fn)(void *ud, uint64_t key, int node, uint64_t used_ms), void *ud)
{
    for (size_t i = 0; i <= s->mask; i++)
        if (s->e[i].key)
            fn(ud, s->e[i].key, s->e[i].node, s->e[i].used_ms);
}

size_t bm_sticky_count(const bm_sticky_t *s, int node)
{
    return node >= 0 && node < BM_MAX_NODES ? s->count[node] : 0;
}

size_t bm_sticky_total(const bm_sticky_t *s)
{
    return s->total;
}

bool bm_sticky_overloaded(const bm_sticky_t *s, int node, double share, double factor)
{
    if (s->total < 8)
        return false;
    return (double)bm_sticky_count(s, node) > factor * share * (double)s->total;
}

uint64_t bm_sticky_key(const char *text, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)text[i];
        h *= 0x100000001b3ull;
    }
    return h;
}
