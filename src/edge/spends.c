/* SPDX-License-Identifier: MIT */
/*
 * spends: an open-addressed table of clients, twice as many slots as clients allowed so
 * that probes stay short, and the list of used slots in arrival order, so that a drain
 * touches only what was used (see spends.h).
 */
#include "edge/spends.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/json.h"

typedef struct entry {
    bool used;
    int cls;
    uint8_t len;
    char key[BM_SPENDS_KEY_MAX + 1];
    bm_rate_t rate;
    uint32_t spent;
} entry_t;

struct bm_spends {
    entry_t *slots;
    size_t mask;
    size_t *order; /* indices of the used slots, in arrival order */
    size_t n, cap;
    uint64_t overflow;
    uint8_t hkey[16];
};

bm_spends_t *bm_spends_new(size_t cap)
{
    if (cap < 1)
        cap = 1;
    size_t slots = 64;
    while (slots < 2 * cap)
        slots <<= 1;
    bm_spends_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->slots = calloc(slots, sizeof *s->slots);
    s->order = calloc(cap, sizeof *s->order);
    if (!s->slots || !s->order) {
        bm_spends_free(s);
        return NULL;
    }
    s->mask = slots - 1;
    s->cap = cap;
    if (getrandom(s->hkey, sizeof s->hkey, 0) != (ssize_t)sizeof s->hkey)
        memset(s->hkey, 0x5a, sizeof s->hkey);
    return s;
}

void bm_spends_free(bm_spends_t *s)
{
    if (!s)
        return;
    free(s->slots);
    free(s->order);
    free(s);
}

/* The client's slot, or the empty slot where it would go; NULL when the key cannot be. */
static entry_t *find(const bm_spends_t *s, int cls, const char *key, size_t n)
{
    if (n > BM_SPENDS_KEY_MAX)
        return NULL;
    uint64_t h = bm_json_siphash(s->hkey, key, n) ^ (uint64_t)cls;
    for (size_t i = 0;; i++) { /* at most half the slots are used: an empty one comes */
        entry_t *e = &s->slots[(h + i) & s->mask];
        if (!e->used || (e->cls == cls && e->len == n && memcmp(e->key, key, n) == 0))
            return e;
    }
}

bool bm_spends_add(bm_spends_t *s, int cls, const char *key, size_t n, const bm_rate_t *r)
{
    entry_t *e = find(s, cls, key, n);
    if (e && !e->used && s->n == s->cap)
        e = NULL;
    if (!e) {
        s->overflow++;
        return false;
    }
    if (!e->used) {
        e->used = true;
        e->cls = cls;
        e->len = (uint8_t)n;
        memcpy(e->key, key, n);
        e->key[n] = '\0';
        e->spent = 0;
        s->order[s->n++] = (size_t)(e - s->slots);
    }
    e->rate = *r;
    e->spent++;
    return true;
}

uint32_t bm_spends_get(const bm_spends_t *s, int cls, const char *key, size_t n)
{
    const entry_t *e = find(s, cls, key, n);
    return e && e->used ? e->spent : 0;
}

size_t bm_spends_drain(bm_spends_t *s, bm_spends_fn fn, void *ud)
{
    size_t n = s->n;
    for (size_t i = 0; i < n; i++) {
        entry_t *e = &s->slots[s->order[i]];
        if (fn)
            fn(ud, e->cls, e->key, e->len, &e->rate, e->spent);
        e->used = false;
    }
    s->n = 0;
    return n;
}

uint64_t bm_spends_overflow(const bm_spends_t *s)
{
    return s->overflow;
}
