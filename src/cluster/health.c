/* SPDX-License-Identifier: MIT */
/*
 * health: the state function. The order of the checks is the order of severity: a node on
 * another network is never used, an unreachable one cannot answer, an undiscovered one
 * has not proven its network yet; a node whose clock is wrong cannot be judged by its
 * heads at all, a forked one follows another chain, a syncing one is far behind by its
 * own word, an optimistic one has not verified its payloads; only then does lag behind
 * the cluster head matter.
 *
 * Evaluation may re-enter (setting a vote flag or the quorum makes the tracker decide,
 * which notifies us, and a state change runs pool listeners): a nested request only marks
 * "again" and the outermost evaluation loops until nothing is left to do.
 */
#include "cluster/health.h"

#include <inttypes.h>
#include <stdlib.h>

#include "base/defaults.h"
#include "base/err.h"
#include "base/json.h"

struct bm_health {
    bm_pool_t *pool;
    bm_health_opts_t opts;
    bm_head_t *head;
    bool busy;
    bool again; /* a nested request arrived: re-evaluate everything */
};

void bm_health_opts_default(bm_health_opts_t *o)
{
    o->max_head_lag = BM_DEFAULT_HEALTH_MAX_HEAD_LAG;
    o->head_quorum = BM_DEFAULT_HEALTH_HEAD_QUORUM;
}

static void run(bm_health_t *h, bm_node_t *n);

static void on_input(bm_node_t *n, void *ud)
{
    run(ud, n);
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
    if (!h)
        return;
    if (h->head)
        bm_head_unlisten(h->head, h);
    free(h);
}

/* ---- tracker listener ----------------------------------------------------------------- */

static void on_head(const bm_head_change_t *c, void *ud)
{
    run(ud, NULL);
}

static void on_node(size_t node, void *ud)
{
    bm_health_t *h = ud;
    bm_node_t *n = bm_pool_node(h->pool, node);
    if (n)
        run(h, n);
}

static void on_tick(uint64_t now_ms, void *ud)
{
    run(ud, NULL);
}

int bm_health_set_head(bm_health_t *h, bm_head_t *t)
{
    if (t && bm_head_node_count(t) < bm_pool_count(h->pool))
        return BM_EINVAL;
    if (h->head)
        bm_head_unlisten(h->head, h);
    h->head = NULL;
    if (t) {
        const bm_head_listener_t l = {.head = on_head, .node = on_node, .tick = on_tick};
        int rc = bm_head_listen(t, &l, h);
        if (rc != 0)
            return rc;
        h->head = t;
    }
    run(h, NULL);
    return 0;
}

/* ---- the state function --------------------------------------------------------------- */

static bool says_syncing(const bm_node_t *n)
{
    return n->syncing.known && n->syncing.is_syncing;
}

static bool says_optimistic(const bm_node_t *n)
{
    return n->syncing.known && (n->syncing.is_optimistic || n->syncing.el_offline);
}

static bool view_of(const bm_health_t *h, const bm_node_t *n, bm_head_node_view_t *v)
{
    return h->head && n->index >= 0 && (size_t)n->index < bm_head_node_count(h->head) &&
           bm_head_node_view(h->head, (size_t)n->index, v) == 0;
}

/* Counts for the automatic quorum: lag plays no part, so the quorum cannot feed back. */
static bool counts(const bm_health_t *h, const bm_node_t *n)
{
    bm_head_node_view_t v;
    bool have = view_of(h, n, &v);
    return !n->shadow && n->network == BM_NET_OK && n->reachable && !says_syncing(n) &&
           !says_optimistic(n) && !(have && (v.time_discrepancy || v.forked || v.optimistic));
}

size_t bm_health_quorum_base(const bm_health_t *h)
{
    size_t c = 0;
    for (size_t i = 0; i < bm_pool_count(h->pool); i++)
        c += counts(h, bm_pool_node(h->pool, i));
    return c;
}

uint32_t bm_health_quorum(const bm_health_t *h)
{
    if (h->opts.head_quorum > 0)
        return h->opts.head_quorum;
    return bm_health_quorum_base(h) >= 3 ? 2 : 1;
}

static void eval_one(bm_health_t *h, bm_node_t *n)
{
    bm_pool_t *p = h->pool;
    const bm_node_syncing_t *s = &n->syncing;
    bm_head_node_view_t v;
    bool have = view_of(h, n, &v);
    if (have) {
        bool may_vote = n->network == BM_NET_OK && !says_syncing(n) && !says_optimistic(n);
        if (v.observer != n->shadow) {
            bm_head_set_node_observer(h->head, (size_t)n->index, n->shadow);
            have = view_of(h, n, &v); /* the tracker may have decided something */
        }
        if (v.may_vote != may_vote) {
            bm_head_set_node_vote(h->head, (size_t)n->index, may_vote);
            have = view_of(h, n, &v);
        }
    }
    bm_head_info_t ch;
    bool has_ch = h->head && bm_head_cluster(h->head, &ch);
    uint64_t chain_slot = 0;
    bool running = h->head && bm_head_chain_slot(h->head, &chain_slot);
    n->head_lag_known = has_ch && have && v.has_head;
    n->head_lag = n->head_lag_known ? (int64_t)ch.slot - (int64_t)v.slot : 0;

    const char *why = bm_node_input_reason(n);
    char a[BM_ROOT_SHORT_LEN + 1], b[BM_ROOT_SHORT_LEN + 1];
    if (n->network == BM_NET_WRONG) {
        bm_pool_set_state(p, n, BM_NODE_WRONG_NETWORK, "%s", why);
    } else if (!n->reachable) {
        bm_pool_set_state(p, n, BM_NODE_UNREACHABLE, "%s", bm_node_reach_reason(n));
    } else if (n->network == BM_NET_UNKNOWN) {
        bm_pool_set_state(p, n, BM_NODE_UNKNOWN, "discovery pending");
    } else if (have && v.td_head) {
        bm_pool_set_state(p, n, BM_NODE_TIME_DISCREPANCY,
                          "head for slot %" PRIu64 " announced %" PRIu64
                          " ms before that slot starts (more than a slot ahead of our clock)",
                          v.td_slot, v.td_early_ms);
    } else if (have && v.td_sync) {
        bm_pool_set_state(p, n, BM_NODE_TIME_DISCREPANCY,
                          "syncing head_slot %" PRIu64 " is more than a slot ahead of our clock",
                          v.td_slot);
    } else if (have && v.forked) {
        bm_root_short(v.root, a);
        bm_root_short(ch.root, b);
        bm_pool_set_state(p, n, BM_NODE_FORKED,
                          "head %s at slot %" PRIu64
                          " is off the cluster chain (cluster head %s at slot %" PRIu64 ")",
                          a, v.slot, b, has_ch ? ch.slot : 0);
    } else if (says_syncing(n)) {
        bm_pool_set_state(p, n, BM_NODE_SYNCING,
                          "node says is_syncing (head_slot %" PRIu64 ", sync_distance %" PRIu64 ")",
                          s->head_slot, s->sync_distance);
    } else if (have && v.optimistic) {
        bm_pool_set_state(p, n, BM_NODE_OPTIMISTIC, "its head at slot %" PRIu64 " is optimistic",
                          v.pending ? v.pending_slot : v.slot);
    } else if (s->known && s->el_offline) {
        bm_pool_set_state(p, n, BM_NODE_OPTIMISTIC,
                          "node says el_offline: it cannot verify execution payloads");
    } else if (s->known && s->is_optimistic) {
        bm_pool_set_state(p, n, BM_NODE_OPTIMISTIC, "node says is_optimistic");
    } else if (running && !(have && v.has_head)) {
        /* Every node holds at least the genesis block once the chain runs: a head we do not
         * know means nothing it answers can be checked for freshness. Not ready, whatever
         * the reason (a stream that has said nothing yet, polls that fail). */
        bm_pool_set_state(p, n, BM_NODE_NO_HEAD,
                          "no head known from it while the chain runs (slot %" PRIu64
                          "); its answers cannot be checked for freshness%s",
                          chain_slot, has_ch ? "" : "; no cluster head either");
    } else if (h->head && !(have && v.has_head)) {
        bm_pool_set_state(p, n, BM_NODE_READY, "discovered, answering; the chain has not started");
    } else if (has_ch && n->head_lag > (int64_t)h->opts.max_head_lag) {
        bm_pool_set_state(p, n, BM_NODE_LAGGING,
                          "%" PRId64 " slots behind the cluster head (slot %" PRIu64
                          ", at most %" PRIu32 " allowed)%s",
                          n->head_lag, ch.slot, h->opts.max_head_lag,
                          v.stale ? "; its event stream is down" : "");
    } else if (has_ch) {
        if (n->head_lag <= 0)
            bm_pool_set_state(p, n, BM_NODE_READY, "at the cluster head (slot %" PRIu64 ")",
                              ch.slot);
        else
            bm_pool_set_state(p, n, BM_NODE_READY,
                              "%" PRId64 " slot%s behind the cluster head (at most %" PRIu32
                              " allowed)",
                              n->head_lag, n->head_lag == 1 ? "" : "s", h->opts.max_head_lag);
    } else if (have && v.has_head) {
        bm_pool_set_state(p, n, BM_NODE_READY,
                          "its head is at slot %" PRIu64 "; no cluster head yet", v.slot);
    } else {
        bm_pool_set_state(p, n, BM_NODE_READY, "discovered, answering");
    }
}

static void run(bm_health_t *h, bm_node_t *n)
{
    if (h->busy) {
        h->again = true;
        return;
    }
    h->busy = true;
    if (n)
        eval_one(h, n);
    else
        h->again = true;
    for (int rounds = 0; h->again && rounds < 16; rounds++) {
        h->again = false;
        for (size_t i = 0; i < bm_pool_count(h->pool); i++)
            eval_one(h, bm_pool_node(h->pool, i));
    }
    if (h->head)
        bm_head_set_quorum(h->head, bm_health_quorum(h)); /* may re-enter: loops below */
    for (int rounds = 0; h->again && rounds < 16; rounds++) {
        h->again = false;
        for (size_t i = 0; i < bm_pool_count(h->pool); i++)
            eval_one(h, bm_pool_node(h->pool, i));
        if (h->head)
            bm_head_set_quorum(h->head, bm_health_quorum(h));
    }
    h->again = false;
    h->busy = false;
}

void bm_health_eval(bm_health_t *h, bm_node_t *n)
{
    run(h, n);
}

void bm_health_eval_all(bm_health_t *h)
{
    run(h, NULL);
}

void bm_health_set_syncing(bm_health_t *h, bm_node_t *n, const bm_node_syncing_t *s,
                           uint64_t now_ms)
{
    if (!s)
        return;
    n->syncing = *s;
    n->syncing.known = true;
    n->syncing.at_ms = now_ms;
    if (h->head && n->index >= 0 && (size_t)n->index < bm_head_node_count(h->head))
        bm_head_on_sync_head(h->head, (size_t)n->index, s->head_slot, now_ms); /* may re-enter */
    run(h, n);
}
