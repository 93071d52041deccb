/* SPDX-License-Identifier: MIT */
/*
 * balance: the score and the four strategies (see balance.h).
 */
#include "read/balance.h"

#include <math.h>
#include <stdbool.h>

#define MAX_ITEMS 64
#define LATENCY_HALF_MS 250.0 /* a p90 this long halves the latency term */
#define LAG_QUARTER 4.0       /* slots of lag that halve the head-lag term */
#define SYNC_HALF 32.0        /* sync distance that halves its term */

const char *bm_balance_strategy_name(bm_balance_strategy_t s)
{
    static const char *const names[BM_BALANCE_COUNT] = {"score", "round-robin", "random",
                                                        "least-conn"};
    return (unsigned)s < BM_BALANCE_COUNT ? names[s] : "invalid";
}

void bm_rng_seed(bm_rng_t *r, uint64_t seed)
{
    r->s = seed ? seed : 0x9E3779B97F4A7C15ull;
}

uint64_t bm_rng_next(bm_rng_t *r)
{
    uint64_t x = r->s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

double bm_rng_unit(bm_rng_t *r)
{
    /* 53 random bits, shifted into (0, 1] so that log() is finite */
    return (double)((bm_rng_next(r) >> 11) + 1) * (1.0 / 9007199254740992.0);
}

/* term^weight by squaring: a few multiplications where pow() costs ~100 instructions, for
 * every candidate of every request. */
static double weighted(double term, uint32_t weight)
{
    double r = 1.0;
    for (double b = term; weight; weight >>= 1, b *= b)
        if (weight & 1)
            r *= b;
    return r;
}

void bm_score_compute(const bm_score_input_t *in, const bm_score_weights_t *w,
                      bm_score_terms_t *out)
{
    double r = in->error_rate < 0 ? 0 : in->error_rate > 1 ? 1 : in->error_rate;
    double p = in->latency_p90_ms > 0 ? in->latency_p90_ms : 0;
    double lag = in->head_lag > 0 ? (double)in->head_lag : 0;
    out->error_rate = 1.0 - r / 2.0;
    out->latency = LATENCY_HALF_MS / (LATENCY_HALF_MS + p);
    out->head_lag = 1.0 / (1.0 + lag / LAG_QUARTER);
    out->sync_distance = 1.0 / (1.0 + (double)in->sync_distance / SYNC_HALF);
    out->score = weighted(out->error_rate, w->error_rate) * weighted(out->latency, w->latency) *
                 weighted(out->head_lag, w->head_lag) *
                 weighted(out->sync_distance, w->sync_distance);
    if (out->score < 1e-300)
        out->score = 1e-300; /* never exactly 0: a last resort still has an order */
}

/* Sorts order[0..n) by key, highest first (insertion sort: tiers are small), stable. */
static void sort_by_key(size_t *order, const double *key, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        size_t v = order[i], j = i;
        while (j > 0 && key[order[j - 1]] < key[v]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = v;
    }
}

/* Sampling without replacement: key log(u) / w, highest first. */
static void sample(const double *w, size_t n, bm_rng_t *rng, size_t *order)
{
    double key[MAX_ITEMS];
    for (size_t i = 0; i < n; i++) {
        double u = bm_rng_unit(rng);
        key[i] = w[i] > 0 ? log(u) / w[i] : -INFINITY;
        order[i] = i;
    }
    sort_by_key(order, key, n);
}

static void round_robin(const bm_balance_item_t *items, size_t n, size_t *order)
{
    double key[MAX_ITEMS];
    int64_t total = 0;
    size_t best = 0;
    for (size_t i = 0; i < n; i++) {
        *items[i].rr += items[i].weight;
        total += items[i].weight;
        if (*items[i].rr > *items[best].rr)
            best = i;
    }
    *items[best].rr -= total;
    for (size_t i = 0; i < n; i++) {
        order[i] = i;
        key[i] = i == best ? INFINITY : (double)*items[i].rr;
    }
    sort_by_key(order, key, n);
}

static void least_conn(const bm_balance_item_t *items, size_t n, bm_rng_t *rng, size_t *order)
{
    double key[MAX_ITEMS];
    for (size_t i = 0; i < n; i++) {
        order[i] = i;
        /* fewer per weight first; a random fraction below one connection breaks ties */
        double load = (double)items[i].in_flight / (double)(items[i].weight ? items[i].weight : 1);
        key[i] = -load - bm_rng_unit(rng) * 1e-6;
    }
    sort_by_key(order, key, n);
}

void bm_balance_order(bm_balance_strategy_t s, const bm_balance_item_t *items, size_t n,
                      bm_rng_t *rng, size_t *order)
{
    double w[MAX_ITEMS];
    if (n > MAX_ITEMS)
        n = MAX_ITEMS;
    if (n == 0)
        return;
    switch (s) {
    case BM_BALANCE_ROUND_ROBIN:
        round_robin(items, n, order);
        return;
    case BM_BALANCE_LEAST_CONN:
        least_conn(items, n, rng, order);
        return;
    case BM_BALANCE_RANDOM:
        for (size_t i = 0; i < n; i++)
            w[i] = items[i].weight;
        break;
    default:
        for (size_t i = 0; i < n; i++)
            w[i] = items[i].score * items[i].weight;
        break;
    }
    sample(w, n, rng, order);
}
