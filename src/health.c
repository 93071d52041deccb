/* SPDX-License-Identifier: MIT */
/*
 * health: the state function. The order of the checks is the order of severity: a node on
 * another network is never used, an unreachable one cannot answer, an undiscovered one
 * has not proven its network yet.
 */
#include "health.h"

#include <stdlib.h>

struct bm_health {
    bm_pool_t *pool;
    bm_health_opts_t opts;
};

void bm_health_opts_default(bm_health_opts_t *o)
{
    o->max_head_lag = 1;
}

static void on_input(bm_node_t *n, void *ud)
{
    bm_health_eval(ud, n);
}

bm_health_t *bm_health_new(bm_pool_t *pool, const bm_health_opts_t *opts)
{
    bm_health_t *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->pool = pool;
    if (opts)
        h->opts = *opts;
    else
        bm_health_opts_default(&h->opts);
    if (bm_pool_on_input(pool, on_input, h) != 0) {
        free(h);
        return NULL;
    }
    return h;
}

void bm_health_free(bm_health_t *h)
{
    free(h);
}

void bm_health_eval(bm_health_t *h, bm_node_t *n)
{
    const char *why = bm_node_input_reason(n);
    if (n->network == BM_NET_WRONG)
        bm_pool_set_state(h->pool, n, BM_NODE_WRONG_NETWORK, "%s", why);
    else if (!n->reachable)
        bm_pool_set_state(h->pool, n, BM_NODE_UNREACHABLE, "%s", why);
    else if (n->network == BM_NET_UNKNOWN)
        bm_pool_set_state(h->pool, n, BM_NODE_UNKNOWN, "discovery pending");
    else
        bm_pool_set_state(h->pool, n, BM_NODE_READY, "discovered, answering");
}

void bm_health_eval_all(bm_health_t *h)
{
    for (size_t i = 0; i < bm_pool_count(h->pool); i++)
        bm_health_eval(h, bm_pool_node(h->pool, i));
}
