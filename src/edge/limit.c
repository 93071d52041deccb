/* SPDX-License-Identifier: MIT */
/*
 * limit: token buckets and the bounded per-client table (see limit.h).
 */
#include "edge/limit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/json.h"

#define PROBE 8 /* slots looked at for a client */

typedef struct slot {
    uint64_t hash; /* 0: empty */
    bm_bucket_t b;
} slot_t;

struct bm_limiter {
    slot_t *slots;
    size_t mask;
    uint8_t hkey[16];
};

static void refill(bm_bucket_t *b, const bm_rate_t *r, uint64_t now_ms)
{
    if (!b->started) {
        b->started = true;
        b->tokens = r->burst;
        b->last_ms = now_ms;
        return;
    }
    if (now_ms > b->last_ms) {
        b->tokens += (double)(now_ms - b->last_ms) * r->rate / 1000.0;
        if (b->tokens > r->burst)
            b->tokens = r->burst;
        b->last_ms = now_ms;
    }
}

bool bm_bucket_take(bm_bucket_t *b, const bm_rate_t *r, uint64_t now_ms, uint32_t *retry_ms)
{
    if (!r || r->rate <= 0)
        return true;
    refill(b, r, now_ms);
    if (b->tokens >= 1.0) {
        b->tokens -= 1.0;
        return true;
    }
    if (retry_ms) {
        double ms = ceil((1.0 - b->tokens) * 1000.0 / r->rate - 1e-6); /* float dust */
        *retry_ms = ms < 1 ? 1 : ms > 3600000 ? 3600000 : (uint32_t)ms;
    }
    return false;
}

void bm_bucket_cap(bm_bucket_t *b, const bm_rate_t *r, uint64_t now_ms, double most)
{
    if (!r || r->rate <= 0)
        return;
    refill(b, r, now_ms);
    if (b->tokens > most)
        b->tokens = most;
}

bm_limiter_t *bm_limiter_new(size_t slots)
{
    size_t n = 64;
    while (n < slots && n < ((size_t)1 << 24))
        n <<= 1;
    bm_limiter_t *l = calloc(1, sizeof *l);
    if (!l)
        return NULL;
    l->slots = calloc(n, sizeof *l->slots);
    if (!l->slots) {
        free(l);
        return NULL;
    }
    l->mask = n - 1;
    if (getrandom(l->hkey, sizeof l->hkey, 0) != (ssize_t)sizeof l->hkey)
        memset(l->hkey, 0x3c, sizeof l->hkey);
    return l;
}

void bm_limiter_free(bm_limiter_t *l)
{
    if (!l)
        return;
    free(l->slots);
    free(l);
}

bool bm_limiter_take(bm_limiter_t *l, const char *key, size_t n, const bm_rate_t *r,
                     uint64_t now_ms, uint32_t *retry_ms)
{
    if (!r || r->rate <= 0)
        return true;
    uint64_t h = bm_json_siphash(l->hkey, key, n) | 1; /* never 0 (empty) */
    slot_t *victim = NULL;
    double fullest = -1;
    for (size_t i = 0; i < PROBE; i++) {
        slot_t *s = &l->slots[(h + i) & l->mask];
        if (s->hash == h)
            return bm_bucket_take(&s->b, r, now_ms, retry_ms);
        if (s->hash == 0) {
            if (fullest < INFINITY) {
                victim = s;
                fullest = INFINITY;
            }
            continue;
        }
        refill(&s->b, r, now_ms);
        if (s->b.tokens > fullest) {
            fullest = s->b.tokens;
            victim = s;
        }
    }
    victim->hash = h;
    memset(&victim->b, 0, sizeof victim->b);
    return bm_bucket_take(&victim->b, r, now_ms, retry_ms);
}

void bm_limiter_cap(bm_limiter_t *l, const char *key, size_t n, const bm_rate_t *r, uint64_t now_ms,
                    double most)
{
    uint64_t h = bm_json_siphash(l->hkey, key, n) | 1;
    for (size_t i = 0; i < PROBE; i++) {
        slot_t *s = &l->slots[(h + i) & l->mask];
        if (s->hash == h) {
            bm_bucket_cap(&s->b, r, now_ms, most);
            return;
        }
    }
}
