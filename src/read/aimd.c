/* SPDX-License-Identifier: MIT */
/*
 * aimd: the auto-tuned token bucket and the hedge budget (see aimd.h).
 */
#include "read/aimd.h"

#include <math.h>

static double cap_of(const bm_aimd_t *b)
{
    return b->rate > 1.0 ? b->rate : 1.0; /* one second of tokens, at least one token */
}

void bm_aimd_init(bm_aimd_t *b, double min, double max, uint64_t now_ms)
{
    *b = (bm_aimd_t){0};
    if (max <= 0)
        return;
    if (min <= 0)
        min = 0.1;
    if (min > max)
        min = max;
    b->min = min;
    b->max = max;
    b->rate = max;
    b->tokens = cap_of(b);
    b->last_ms = now_ms;
}

bool bm_aimd_enabled(const bm_aimd_t *b)
{
    return b->max > 0;
}

static void refill(bm_aimd_t *b, uint64_t now_ms)
{
    if (now_ms <= b->last_ms)
        return;
    b->tokens += b->rate * (double)(now_ms - b->last_ms) / 1000.0;
    if (b->tokens > cap_of(b))
        b->tokens = cap_of(b);
    b->last_ms = now_ms;
}

uint64_t bm_aimd_wait_ms(bm_aimd_t *b, uint64_t now_ms)
{
    if (now_ms < b->closed_until_ms)
        return b->closed_until_ms - now_ms;
    if (!bm_aimd_enabled(b))
        return 0;
    refill(b, now_ms);
    if (b->tokens >= 1.0)
        return 0;
    double ms = ceil((1.0 - b->tokens) * 1000.0 / b->rate);
    return ms < 1 ? 1 : (uint64_t)ms;
}

uint64_t bm_aimd_take(bm_aimd_t *b, uint64_t now_ms)
{
    uint64_t wait = bm_aimd_wait_ms(b, now_ms);
    if (wait == 0 && bm_aimd_enabled(b))
        b->tokens -= 1.0;
    return wait;
}

void bm_aimd_throttled(bm_aimd_t *b, uint32_t retry_after_ms, uint64_t now_ms)
{
    b->throttled++;
    if (retry_after_ms && now_ms + retry_after_ms > b->closed_until_ms)
        b->closed_until_ms = now_ms + retry_after_ms;
    if (!bm_aimd_enabled(b))
        return;
    refill(b, now_ms);
    b->rate /= 2;
    if (b->rate < b->min)
        b->rate = b->min;
    if (b->tokens > cap_of(b))
        b->tokens = cap_of(b);
}

void bm_aimd_success(bm_aimd_t *b)
{
    if (!bm_aimd_enabled(b))
        return;
    b->rate += 1.0 / b->rate;
    if (b->rate > b->max)
        b->rate = b->max;
}

void bm_hedge_budget_init(bm_hedge_budget_t *h, double ratio, double burst)
{
    *h = (bm_hedge_budget_t){.ratio = ratio, .burst = burst < 1 ? 1 : burst};
    h->balance = ratio > 0 ? 1 : 0;
}

void bm_hedge_budget_earn(bm_hedge_budget_t *h)
{
    h->balance += h->ratio;
    if (h->balance > h->burst)
        h->balance = h->burst;
}

bool bm_hedge_budget_spend(bm_hedge_budget_t *h)
{
    if (h->balance >= 1.0) {
        h->balance -= 1.0;
        h->spent++;
        return true;
    }
    h->refused++;
    return false;
}
