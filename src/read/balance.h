/* SPDX-License-Identifier: MIT */
/*
 * balance: how the read path orders the candidates of one priority tier. Pure logic: the
 * figures come in as numbers, randomness from a seeded generator the caller owns, and the
 * result is an order of indices; no clock, no I/O, so every strategy's distribution is
 * unit-tested directly.
 *
 * Strategies (routing.loadBalancing):
 *   score        weighted sampling without replacement by score x weight (the default)
 *   round-robin  smooth weighted round-robin (nginx's): each pick adds every weight to its
 *                node's current value, takes the largest, and subtracts the total from it
 *   random       weighted sampling without replacement by weight alone
 *   least-conn   lowest in_flight / weight first; ties in random order
 *
 * Sampling without replacement uses one key per candidate, log(u) / w with u uniform in
 * (0, 1], sorted high to low (Efraimidis and Spirakis): the first pick is node i with
 * probability w_i / sum(w), and the rest follow as if drawn again from what is left.
 *
 * The score of a node is the product of four terms, each in (0, 1] and raised to its weight
 * (routing.scoreWeights; a weight of 0 ignores the term):
 *   errorRate     1 - r/2          r: failed share of the node's last 64 exchanges
 *   latency       250 / (250 + p)  p: p90 in ms of its last 64 successful exchanges
 *   headLag       1 / (1 + l/4)    l: slots behind the cluster head (0 when ahead, unknown)
 *   syncDistance  1 / (1 + d/32)   d: the sync_distance of its last syncing answer
 * With the default weights (4, 8, 2, 1), a node failing half its reads scores 0.32, a node
 * whose p90 is 250 ms scores 0.004 next to one at 5 ms (0.85), one slot of lag costs 36 %.
 */
#ifndef BM_BALANCE_H
#define BM_BALANCE_H

#include <stddef.h>
#include <stdint.h>

typedef enum bm_balance_strategy {
    BM_BALANCE_SCORE = 0,
    BM_BALANCE_ROUND_ROBIN,
    BM_BALANCE_RANDOM,
    BM_BALANCE_LEAST_CONN,
    BM_BALANCE_COUNT
} bm_balance_strategy_t;

/** "score", "round-robin", "random", "least-conn". */
const char *bm_balance_strategy_name(bm_balance_strategy_t s);

/** A small seeded generator (xorshift64*): the same seed gives the same picks. */
typedef struct bm_rng {
    uint64_t s;
} bm_rng_t;

/** Seeds the generator (any value; 0 is replaced by a fixed constant). */
void bm_rng_seed(bm_rng_t *r, uint64_t seed);

/** Next 64 random bits. */
uint64_t bm_rng_next(bm_rng_t *r);

/** Uniform in (0, 1]. */
double bm_rng_unit(bm_rng_t *r);

/** The weights of the score's terms (routing.scoreWeights). */
typedef struct bm_score_weights {
    uint32_t error_rate, latency, head_lag, sync_distance;
} bm_score_weights_t;

/** What the score is computed from. */
typedef struct bm_score_input {
    double error_rate;     /* 0..1 over recent exchanges */
    double latency_p90_ms; /* 0 when nothing is known */
    int64_t head_lag;      /* slots behind the cluster head; <= 0 ahead or unknown */
    uint64_t sync_distance;
} bm_score_input_t;

/** Each term in (0, 1] before its weight, and the score (the weighted product). */
typedef struct bm_score_terms {
    double error_rate, latency, head_lag, sync_distance;
    double score;
} bm_score_terms_t;

/** Computes the terms and the score of one node. */
void bm_score_compute(const bm_score_input_t *in, const bm_score_weights_t *w,
                      bm_score_terms_t *out);

/** One candidate of a tier, as the strategies see it. */
typedef struct bm_balance_item {
    uint32_t weight;    /* upstreams[].weight, >= 1 */
    double score;       /* bm_score_compute's score (score strategy) */
    uint64_t in_flight; /* exchanges running now (least-conn) */
    int64_t *rr;        /* the node's smooth round-robin value, kept by the caller */
} bm_balance_item_t;

/**
 * Orders items[0..n) by strategy `s`: writes a permutation of 0..n-1 into order, best first.
 * round-robin advances the items' `rr` values by one pick (the first of the order);
 * the other strategies draw from `rng`. n is at most 64.
 */
void bm_balance_order(bm_balance_strategy_t s, const bm_balance_item_t *items, size_t n,
                      bm_rng_t *rng, size_t *order);

#endif /* BM_BALANCE_H */
