/* SPDX-License-Identifier: MIT */
/*
 * readpath: one exchange per client request (see readpath.h). An exchange has up to
 * MAX_PARALLEL attempts at once; each attempt is one streamed transfer to one node. Until an
 * answer is chosen nothing reaches the client. Its times (hedge, retry delay, deadline) wait
 * in one list of the read path, earliest first, under one timer: a proxied request costs no
 * timer of its own (duelist.h). The types are in readpath_int.h.
 *
 * An attempt's phases:
 *   HEAD    running, no response head yet
 *   KEEP    a failed answer (5xx, 429, 415, pruned history): kept, up to MAX_KEPT_BODY, to
 *           relay if every attempt fails; or a blob 400 held to read whether it is custody
 *   HELD    the chosen answer, held until complete (up to hold_bytes)
 *   STREAM  the chosen answer, committed: streamed to the client
 * In consensus mode every answer is held (up to MAX_CONSENSUS_BODY) and compared at its end.
 */
#include "read/readpath.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/clock.h"
#include "base/defaults.h"
#include "base/err.h"
#include "base/log.h"
#include "base/url.h"
#include "read/answerhead.h"
#include "read/canon.h"
#include "read/pick.h"
#include "read/readpath_int.h"

#define SSZ_MEMORY_MS (10 * 60 * 1000) /* a node's refusal of SSZ remembered this long */
#define COOLDOWN_429_MS 1000           /* a 429 without Retry-After closes the node this long */
#define STICKY_CAPACITY 4096
#define MAX_SPARE 64 /* finished exchanges kept for reuse */

static const bm_xfer_cbs_t xfer_cbs;

/* ---- options, life ------------------------------------------------------------------ */

void bm_readpath_opts_default(bm_readpath_opts_t *o)
{
    *o = (bm_readpath_opts_t){0};
    o->connect_timeout_ms = BM_DEFAULT_TIMEOUTS_CONNECT_MS;
    o->read_timeout_ms = BM_DEFAULT_TIMEOUTS_READ_MS;
    o->write_timeout_ms = BM_DEFAULT_TIMEOUTS_WRITE_MS;
    o->hold_bytes = 1 << 20;
    o->timeout_ms = BM_DEFAULT_FAILSAFE_TIMEOUT_MS;
    o->heavy_timeout_ms = BM_DEFAULT_FAILSAFE_HEAVY_TIMEOUT_MS;
    o->max_attempts = BM_DEFAULT_FAILOVER_MAX_ATTEMPTS;
    o->retry_delay_ms = BM_DEFAULT_FAILSAFE_RETRY_DELAY_MS;
    o->retry_backoff_milli = BM_DEFAULT_FAILSAFE_RETRY_BACKOFF;
    o->retry_max_delay_ms = BM_DEFAULT_FAILSAFE_RETRY_MAX_DELAY_MS;
    o->retry_jitter_ms = BM_DEFAULT_FAILSAFE_RETRY_JITTER_MS;
    o->hedge_delay_ms = BM_DEFAULT_FAILSAFE_HEDGE_DELAY_MS;
    o->hedge_max_count = BM_DEFAULT_FAILSAFE_HEDGE_MAX_COUNT;
    o->hedge_max_ratio_milli = BM_DEFAULT_FAILSAFE_HEDGE_MAX_RATIO;
    o->hedge_max_priority = BM_DEFAULT_FAILSAFE_HEDGE_MAX_PRIORITY;
    bm_breaker_opts_default(&o->breaker);
    o->strategy = BM_BALANCE_SCORE;
    o->weights = (bm_score_weights_t){
        BM_DEFAULT_ROUTING_SCORE_WEIGHT_ERROR_RATE, BM_DEFAULT_ROUTING_SCORE_WEIGHT_LATENCY,
        BM_DEFAULT_ROUTING_SCORE_WEIGHT_HEAD_LAG, BM_DEFAULT_ROUTING_SCORE_WEIGHT_SYNC_DISTANCE};
    o->sticky = BM_DEFAULT_ROUTING_STICKY_ENABLED;
    o->sticky_factor_milli = BM_DEFAULT_ROUTING_STICKY_REBALANCE_FACTOR;
    bm_retention_default(&o->retention);
}

static void on_due(bm_duelink_t *d, void *ud);

bm_readpath_t *bm_readpath_new(uv_loop_t *loop, bm_upstream_t *up, bm_pool_t *pool,
                               bm_discovery_t *disc, const bm_readpath_opts_t *o)
{
    bm_readpath_t *rp = calloc(1, sizeof *rp);
    if (!rp)
        return NULL;
    rp->loop = loop;
    rp->up = up;
    rp->pool = pool;
    rp->disc = disc;
    if (o)
        rp->opts = *o;
    else
        bm_readpath_opts_default(&rp->opts);
    if (rp->opts.max_attempts == 0)
        rp->opts.max_attempts = 1;
    rp->rules = bm_rules_new();
    rp->sticky = rp->opts.sticky ? bm_sticky_new(STICKY_CAPACITY) : NULL;
    rp->due = bm_duelist_new(loop, on_due, rp);
    if (!rp->rules || (rp->opts.sticky && !rp->sticky) || !rp->due) {
        bm_readpath_free(rp);
        return NULL;
    }
    bm_rng_seed(&rp->rng, rp->opts.seed ? rp->opts.seed : bm_clock_now_ms() ^ (uintptr_t)rp);
    bm_hedge_budget_init(&rp->budget, rp->opts.hedge_max_ratio_milli / 1000.0, 10);
    for (size_t i = 0; i < BM_MAX_NODES; i++) {
        bm_readpath_set_node(rp, i, &(bm_readpath_node_opts_t){.weight = 1});
        bm_breaker_init(&rp->node[i].breaker, &rp->opts.breaker);
    }
    return rp;
}

static void exchange_free(exchange_t *ex);

void bm_readpath_free(bm_readpath_t *rp)
{
    if (!rp)
        return;
    bm_duelist_free(rp->due);
    while (rp->spare) {
        exchange_t *ex = rp->spare;
        rp->spare = ex->spare_next;
        exchange_free(ex);
    }
    bm_rules_free(rp->rules);
    bm_sticky_free(rp->sticky);
    bm_str_dispose(&rp->url);
    free(rp);
}

void bm_readpath_set_node(bm_readpath_t *rp, size_t i, const bm_readpath_node_opts_t *o)
{
    if (i >= BM_MAX_NODES)
        return;
    node_state_t *ns = &rp->node[i];
    ns->o = *o;
    if (ns->o.weight == 0)
        ns->o.weight = 1;
    bm_aimd_init(&ns->bucket, o->autotune_min, o->autotune_max, uv_now(rp->loop));
}

void bm_readpath_set_rules(bm_readpath_t *rp, bm_rules_t *rules)
{
    bm_rules_free(rp->rules);
    rp->rules = rules;
}

size_t bm_readpath_active(const bm_readpath_t *rp)
{
    return rp->active;
}

bm_balance_strategy_t bm_readpath_strategy(const bm_readpath_t *rp)
{
    return rp->opts.strategy;
}

const bm_readpath_counters_t *bm_readpath_counters(const bm_readpath_t *rp)
{
    return &rp->c;
}

const bm_breaker_t *bm_readpath_breaker(const bm_readpath_t *rp, size_t i)
{
    return i < BM_MAX_NODES ? &rp->node[i].breaker : NULL;
}

/* ---- the score and the candidate order ---------------------------------------------- */

static void node_terms(const bm_readpath_t *rp, const bm_node_t *n, bm_score_terms_t *t)
{
    bm_score_input_t in = {
        .error_rate = bm_node_recent_error_rate(n),
        .latency_p90_ms = bm_node_recent_latency_ms(n, 90),
        .head_lag = n->head_lag_known ? n->head_lag : 0,
        .sync_distance = n->syncing.known ? n->syncing.sync_distance : 0,
    };
    bm_score_compute(&in, &rp->opts.weights, t);
}

static bool refuses_ssz(node_state_t *ns, uint64_t key, uint64_t now)
{
    for (size_t i = 0; i < SSZ_MEMORY; i++)
        if (ns->no_ssz[i] == key && ns->no_ssz_until[i] > now)
            return true;
    return false;
}

static void remember_no_ssz(node_state_t *ns, uint64_t key, uint64_t now)
{
    for (size_t i = 0; i < SSZ_MEMORY; i++) {
        if (ns->no_ssz[i] == key) {
            ns->no_ssz_until[i] = now + SSZ_MEMORY_MS;
            return;
        }
    }
    ns->no_ssz[ns->no_ssz_next] = key;
    ns->no_ssz_until[ns->no_ssz_next] = now + SSZ_MEMORY_MS;
    ns->no_ssz_next = (ns->no_ssz_next + 1) % SSZ_MEMORY;
}

/* Why node i cannot take an attempt of `ex` now: 0 when it can; 1 never for this exchange;
 * 2 not now (bucket, Retry-After: *wait gets how long). */
static int excluded(exchange_t *ex, size_t i, const bm_node_t *n, bool hedge, uint64_t now,
                    uint64_t *wait)
{
    bm_readpath_t *rp = ex->rp;
    node_state_t *ns = &rp->node[i];
    if (ex->tried & (1ull << i))
        return 1;
    if (n->shadow)
        return 1; /* its answers are never served (duties/shadow.h) */
    if (ex->s.restrict_nodes && !(ex->s.nodes & (1ull << i)))
        return 1;
    if (ex->s.client && (int)n->client != ex->s.client)
        return 1;
    if (ex->s.ready_only && n->state != BM_NODE_READY)
        return 1;
    if (hedge && ns->o.priority > rp->opts.hedge_max_priority)
        return 1; /* metered tiers are not hedged to */
    if (ex->ssz_accept && refuses_ssz(ns, ex->route_key, now))
        return 1;
    if (!bm_breaker_allows(&ns->breaker, now)) {
        rp->c.breaker_skips++;
        return 1;
    }
    uint64_t w = bm_aimd_wait_ms(&ns->bucket, now);
    if (w) {
        *wait = w;
        return 2;
    }
    return 0;
}

/* True when `nd` has as many requests in flight as its connection pool holds: one more
 * would wait for a connection behind them. */
static bool busy(const node_state_t *ns, const bm_node_t *nd)
{
    return ns->o.max_in_flight && nd->stats.in_flight >= ns->o.max_in_flight;
}

/* Sticks the client to `node`, telling the listener when that changes where it sticks. */
static void stick(bm_readpath_t *rp, uint64_t key, int node, uint64_t now)
{
    bool changed = rp->on_sticky && bm_sticky_get(rp->sticky, key, now) != node;
    bm_sticky_set(rp->sticky, key, node, now);
    if (changed)
        rp->on_sticky(rp->on_sticky_ud, key, node);
}

void bm_readpath_on_sticky(bm_readpath_t *rp, bm_readpath_sticky_fn fn, void *ud)
{
    rp->on_sticky = fn;
    rp->on_sticky_ud = ud;
}

typedef struct sticky_walk {
    void (*fn)(void *ud, uint64_t key, int node, uint64_t age_ms);
    void *ud;
    uint64_t now;
} sticky_walk_t;

static void sticky_walk_one(void *ud, uint64_t key, int node, uint64_t used_ms)
{
    sticky_walk_t *w = ud;
    w->fn(w->ud, key, node, w->now > used_ms ? w->now - used_ms : 0);
}

void bm_readpath_sticky_each(bm_readpath_t *rp,
                             void (*fn)(void *ud, uint64_t key, int node, uint64_t age_ms),
                             void *ud)
{
    if (!rp->sticky)
        return;
    sticky_walk_t w = {fn, ud, uv_now(rp->loop)};
    bm_sticky_each(rp->sticky, sticky_walk_one, &w);
}

void bm_readpath_sticky_adopt(bm_readpath_t *rp, uint64_t key, int node, uint64_t age_ms)
{
    uint64_t now = uv_now(rp->loop);
    if (rp->sticky && node >= 0 && (size_t)node < bm_pool_count(rp->pool))
        bm_sticky_set(rp->sticky, key, node, now > age_ms ? now - age_ms : 0);
}

void bm_readpath_sticky_learn(bm_readpath_t *rp, uint64_t key, int node)
{
    bm_readpath_sticky_adopt(rp, key, node, 0);
}

size_t bm_readpath_sticky_clients(const bm_readpath_t *rp)
{
    return rp->sticky ? bm_sticky_total(rp->sticky) : 0;
}

/* The next node for an attempt of `ex`, or NULL; *wait gets the shortest wait of a node
 * that only lacks a token (0: none). A busy node is a candidate only when every other one
 * is excluded or busy too: a free node of a later set or tier is asked before it, and a
 * read that finds every node busy still queues on the best of them. */
static bm_node_t *next_node(exchange_t *ex, bool hedge, uint64_t now, uint64_t *wait)
{
    bm_readpath_t *rp = ex->rp;
    size_t n = bm_pool_count(rp->pool);
    bm_pick_node_t cand[BM_MAX_NODES];
    bool any_busy = false;
    *wait = 0;
    if (n > BM_MAX_NODES)
        n = BM_MAX_NODES;
    for (size_t i = 0; i < n; i++) {
        bm_node_t *nd = bm_pool_node(rp->pool, i);
        node_state_t *ns = &rp->node[i];
        bm_score_terms_t t;
        uint64_t w = 0;
        int why = excluded(ex, i, nd, hedge, now, &w);
        if (why == 2 && (*wait == 0 || w < *wait))
            *wait = w;
        node_terms(rp, nd, &t);
        bool full = why == 0 && busy(ns, nd);
        any_busy |= full;
        cand[i] = (bm_pick_node_t){
            .set = bm_pick_set_of(nd->state),
            .priority = ns->o.priority,
            .archive = ns->o.archive,
            .available = why == 0 && !full,
            .item = {ns->o.weight, t.score, nd->stats.in_flight, &ns->rr},
        };
    }
    bm_pick_opts_t po = {ex->s.strategy, ex->archive_first, ex->archive_only};
    size_t order[1];
    if (bm_pick_order(cand, n, &po, 1, &rp->rng, order) == 0) {
        if (!any_busy)
            return NULL;
        /* every node left is busy: the best of them, where the read waits for a connection */
        for (size_t i = 0; i < n; i++)
            cand[i].available = cand[i].available || busy(&rp->node[i], bm_pool_node(rp->pool, i));
        if (bm_pick_order(cand, n, &po, 1, &rp->rng, order) == 0)
            return NULL;
        rp->c.busy_waits++;
    } else if (any_busy) {
        rp->c.busy_skips++;
    }
    bm_node_t *best = bm_pool_node(rp->pool, order[0]);
    if (!ex->sticky || ex->started > 0)
        return best;
    /* sticky: the client's node while it is as good a candidate as the pick (same set, same
     * tier) and not holding more than its share of the clients */
    int s = bm_sticky_get(rp->sticky, ex->sticky_key, now);
    if (s >= 0 && (size_t)s < n && cand[s].available && cand[s].set == cand[order[0]].set &&
        cand[s].priority == cand[order[0]].priority) {
        double total = 0;
        for (size_t i = 0; i < n; i++)
            if (cand[i].available && cand[i].set == cand[s].set &&
                cand[i].priority == cand[s].priority)
                total += cand[i].item.weight;
        double share = total > 0 ? cand[s].item.weight / total : 1;
        if (!bm_sticky_overloaded(rp->sticky, s, share, rp->opts.sticky_factor_milli / 1000.0))
            return bm_pool_node(rp->pool, (size_t)s);
    }
    if (s >= 0 && (size_t)s != order[0])
        rp->c.sticky_moves++;
    stick(rp, ex->sticky_key, (int)order[0], now);
    return best;
}

/* True when some node could serve as an archive for this exchange. */
static bool archive_available(exchange_t *ex)
{
    bm_readpath_t *rp = ex->rp;
    for (size_t i = 0; i < bm_pool_count(rp->pool) && i < BM_MAX_NODES; i++) {
        const bm_node_t *n = bm_pool_node(rp->pool, i);
        if (rp->node[i].o.archive && !(ex->tried & (1ull << i)) && bm_node_usable(n) &&
            (!ex->s.restrict_nodes || (ex->s.nodes & (1ull << i))))
            return true;
    }
    return false;
}

/* ---- exchange life ------------------------------------------------------------------ */

/* An attempt's answer fields, wherever they are. */
static const bm_hdrs_t *answer_fields(const attempt_t *a)
{
    return a->view ? a->view : &a->hdrs;
}

/* The transfer of `a` ends: its fields are copied when the answer may still be sent. */
static void own_fields(exchange_t *ex, attempt_t *a)
{
    if (!a->view)
        return;
    if (!ex->finished && a->phase != AT_IDLE) {
        bm_hdrs_clear(&a->hdrs);
        for (size_t i = 0; i < a->view->n; i++) {
            const bm_header_t *h = &a->view->items[i];
            bm_hdrs_add(&a->hdrs, h->name, h->name_len, h->value, h->value_len);
        }
    }
    a->view = NULL;
}

/* ---- timers ------------------------------------------------------------------------- */

static void unschedule(exchange_t *ex)
{
    bm_duelist_cancel(ex->rp->due, &ex->due);
}

static void on_timer(exchange_t *ex);

/* An exchange's time came (duelist.h: one timer for every exchange). */
static void on_due(bm_duelink_t *d, void *ud)
{
    (void)ud;
    on_timer((exchange_t *)((char *)d - offsetof(exchange_t, due)));
}

/* ---- exchange life ------------------------------------------------------------------ */

static void detached_free(detached_t *d)
{
    if (!d)
        return;
    bm_str_dispose(&d->method);
    bm_str_dispose(&d->target);
    bm_str_dispose(&d->peer);
    bm_hdrs_dispose(&d->headers);
    free(d);
}

static void exchange_free(exchange_t *ex)
{
    for (int i = 0; i < ex->used; i++) {
        bm_hdrs_dispose(&ex->at[i].hdrs);
        bm_str_dispose(&ex->at[i].body);
    }
    bm_str_dispose(&ex->errors);
    detached_free(ex->fetch);
    free(ex);
}

/* A cleared exchange: a spare one, or a new one. NULL when out of memory. */
static exchange_t *exchange_alloc(bm_readpath_t *rp)
{
    exchange_t *ex = rp->spare;
    if (!ex)
        return calloc(1, sizeof *ex);
    rp->spare = ex->spare_next;
    rp->n_spare--;
    memset(ex, 0, offsetof(exchange_t, at)); /* the attempts were cleared when it was kept */
    return ex;
}

/* The exchange is over: kept as a spare (its attempts as new), or freed. */
static void exchange_release(bm_readpath_t *rp, exchange_t *ex)
{
    if (rp->n_spare >= MAX_SPARE) {
        exchange_free(ex);
        return;
    }
    bm_str_dispose(&ex->errors);
    detached_free(ex->fetch);
    ex->fetch = NULL;
    for (int i = 0; i < ex->used; i++) {
        attempt_t *a = &ex->at[i];
        bm_hdrs_dispose(&a->hdrs);
        bm_str_dispose(&a->body);
        *a = (attempt_t){0};
    }
    ex->spare_next = rp->spare;
    rp->spare = ex;
    rp->n_spare++;
}

/* Leaves one of our callbacks; releases the exchange when it is finished, nobody is inside
 * and no transfer runs. */
static void leave(exchange_t *ex)
{
    if (--ex->busy == 0 && ex->finished && ex->running == 0) {
        bm_readpath_t *rp = ex->rp;
        rp->active--;
        unschedule(ex);
        exchange_release(rp, ex);
    }
}

static void cancel_attempt(exchange_t *ex, attempt_t *a)
{
    if (!a->xfer)
        return;
    bm_upstream_cancel(a->xfer);
    a->xfer = NULL;
    own_fields(ex, a);
    a->node->stats.in_flight--;
    ex->running--;
    bm_breaker_done(&ex->rp->node[a->node->index].breaker, false, true, uv_now(ex->rp->loop));
}

static void cancel_all(exchange_t *ex, int except)
{
    for (int i = 0; i < ex->used; i++)
        if (i != except && ex->at[i].xfer)
            cancel_attempt(ex, &ex->at[i]);
}

static void finish_end(exchange_t *ex)
{
    if (ex->finished)
        return;
    ex->finished = true;
    cancel_all(ex, ex->winner);
    bm_resp_end(ex->req);
}

/* Marks the exchange finished after a bm_resp_send/error call answered the client. */
static void finished(exchange_t *ex)
{
    ex->finished = true;
    cancel_all(ex, -1);
}

static void on_client_abort(bm_req_t *req, void *ud)
{
    exchange_t *ex = ud;
    (void)req;
    ex->busy++;
    cancel_all(ex, -1);
    finish_end(ex); /* writes are dropped now; this releases the request */
    leave(ex);
}

static void on_client_drain(bm_req_t *req, void *ud)
{
    exchange_t *ex = ud;
    (void)req;
    attempt_t *w = ex->winner >= 0 ? &ex->at[ex->winner] : NULL;
    if (ex->paused && w && w->xfer) {
        ex->paused = false;
        bm_upstream_resume(w->xfer);
    }
}

static void add_error(exchange_t *ex, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void add_error(exchange_t *ex, const char *fmt, ...)
{
    va_list ap;
    if (bm_str_len(&ex->errors) > 1024)
        return;
    if (bm_str_len(&ex->errors))
        bm_str_puts(&ex->errors, "; ");
    va_start(ap, fmt);
    bm_str_vprintf(&ex->errors, fmt, ap);
    va_end(ap);
}

/* ---- answering ---------------------------------------------------------------------- */

/* Gives a detached read its answer (once). */
static void deliver(exchange_t *ex, const bm_readpath_answer_t *ans)
{
    bm_readpath_answer_fn cb = ex->fetch->cb;
    ex->fetch->cb = NULL;
    if (cb)
        cb(ans, ex->fetch->ud);
}

/* Answers {"code":status,"message":...}: to the client, or to a detached read's callback. */
static void reply_error(exchange_t *ex, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void reply_error(exchange_t *ex, int status, const char *fmt, ...)
{
    bm_str_t msg = BM_STR_INIT;
    va_list ap;
    va_start(ap, fmt);
    bm_str_vprintf(&msg, fmt, ap);
    va_end(ap);
    if (ex->req) {
        bm_resp_error(ex->req, status, "%s", bm_str_data(&msg));
    } else {
        bm_str_t b = BM_STR_INIT;
        bm_str_printf(&b, "{\"code\":%d,\"message\":", status);
        bm_str_json_string(&b, bm_str_data(&msg), bm_str_len(&msg));
        bm_str_putc(&b, '}');
        bm_buf_t *body = bm_str_finish(&b);
        bm_readpath_answer_t ans = {.status = status, .body = body, .node = -1};
        deliver(ex, &ans);
        bm_buf_unref(body);
    }
    bm_str_dispose(&msg);
}

/* A detached read's answer grew past its bound: nothing is kept, the caller asks again. */
static void reply_too_big(exchange_t *ex)
{
    bm_readpath_answer_t ans = {.status = 0, .too_big = true, .node = -1};
    deliver(ex, &ans);
    finished(ex);
}

/* Sends a complete held answer with its exact length. */
static void send_attempt(exchange_t *ex, attempt_t *a)
{
    bm_buf_t *body = bm_str_finish(&a->body);
    if (ex->req) {
        if (a->node)
            bm_req_add_upstream(ex->req, a->node->index);
        bm_resp_send(ex->req, a->status, NULL, body, answer_fields(a));
    } else {
        bm_readpath_answer_t ans = {.status = a->status,
                                    .hdrs = answer_fields(a),
                                    .body = body,
                                    .from_node = true,
                                    .node = (int)a->node->index};
        deliver(ex, &ans);
    }
    bm_buf_unref(body);
    finished(ex);
}

/* Nothing usable came: the last kept answer, or an error naming what happened. */
static void answer_failure(exchange_t *ex)
{
    if (ex->finished)
        return;
    if (ex->kept >= 0) {
        send_attempt(ex, &ex->at[ex->kept]);
        return;
    }
    const char *why = bm_str_len(&ex->errors) ? bm_str_data(&ex->errors) : "none available";
    if (ex->timed_out) {
        reply_error(ex, 504, "no upstream answered within %u ms: %s", ex->s.timeout_ms, why);
    } else if (ex->started == 0 && ex->s.client) {
        reply_error(ex, 503, "no usable %s upstream", bm_client_name(ex->s.client));
    } else if (ex->started == 0 && ex->s.ready_only) {
        reply_error(ex, 503, "no ready upstream");
    } else if (ex->started == 0) {
        reply_error(ex, 503, "no usable upstream");
    } else if (ex->invalid) {
        reply_error(ex, 502, "no valid upstream answer: %s", why);
    } else {
        reply_error(ex, 503, "no upstream answered: %s", why);
    }
    finished(ex);
}

/* Sends the held head and body of the winner and switches to streaming. */
static void commit(exchange_t *ex, attempt_t *a)
{
    a->phase = AT_STREAM;
    ex->committed = true;
    if (a->node)
        bm_req_add_upstream(ex->req, a->node->index);
    if (bm_resp_start(ex->req, a->status, answer_fields(a), a->length) != 0) {
        cancel_attempt(ex, a); /* the client is gone; on_client_abort ends the request */
        return;
    }
    if (bm_str_len(&a->body)) {
        bm_buf_t *b = bm_str_finish(&a->body);
        if (b)
            bm_resp_write(ex->req, b);
        bm_buf_unref(b);
    }
}

/* ---- attempts ----------------------------------------------------------------------- */

static attempt_t *free_slot(exchange_t *ex)
{
    for (int i = 0; i < MAX_PARALLEL; i++) {
        if (!ex->at[i].xfer && ex->at[i].phase == AT_IDLE && i != ex->kept) {
            if (i >= ex->used)
                ex->used = i + 1;
            return &ex->at[i];
        }
    }
    return NULL;
}

/* Starts one transfer of the request to `node`. False when it could not start. */
static bool launch(exchange_t *ex, bm_node_t *node, bool hedge)
{
    bm_readpath_t *rp = ex->rp;
    attempt_t *a = free_slot(ex);
    if (!a)
        return false;
    ex->tried |= 1ull << node->index;
    bm_str_t *url = &rp->url;
    bm_str_clear(url);
    const char *target = ex->v.target + ex->target_off;
    int rc;
    if (ex->strip && target[0] != '/') {
        bm_str_t t = BM_STR_INIT;
        bm_str_putc(&t, '/');
        bm_str_puts(&t, target);
        rc = bm_url_join_valid_base(url, node->url, bm_str_data(&t));
        bm_str_dispose(&t);
    } else {
        rc = bm_url_join_valid_base(url, node->url, target);
    }
    if (rc != 0) {
        add_error(ex, "%s: the path cannot be joined to its URL", node->id);
        return false;
    }
    bm_xfer_req_t xr = {
        .method = ex->v.method,
        .url = bm_str_data(url),
        .headers = ex->v.headers,
        .extra = &node->extra,
        .forwarded_for = node->forwarded_for && ex->v.peer && ex->v.peer[0] ? ex->v.peer : NULL,
        .body = ex->v.body,
        .connect_timeout_ms = rp->opts.connect_timeout_ms,
        .timeout_ms = ex->is_read ? 0 : rp->opts.write_timeout_ms,
        .idle_timeout_ms = ex->is_read ? rp->opts.read_timeout_ms : 0,
        .stream = true,
        /* reads may be large: a hosted (https, metered) node sends them gzip */
        .compress = ex->is_read && strcmp(ex->v.method, "GET") == 0,
    };
    bm_hdrs_clear(&a->hdrs);
    bm_str_clear(&a->body);
    *a = (attempt_t){.ex = ex,
                     .node = node,
                     .hedge = hedge,
                     .phase = AT_HEAD,
                     .hdrs = a->hdrs,
                     .body = a->body,
                     .length = -1};
    a->xfer = bm_upstream_start(rp->up, &xr, &xfer_cbs, a);
    if (!a->xfer) {
        a->phase = AT_IDLE;
        add_error(ex, "%s: could not start a request", node->id);
        return false;
    }
    node->stats.in_flight++;
    ex->running++;
    ex->started++;
    rp->c.attempts++;
    bm_breaker_start(&rp->node[node->index].breaker);
    bm_aimd_take(&rp->node[node->index].bucket, uv_now(rp->loop));
    return true;
}

static void arm_timer(exchange_t *ex);
static void consensus_failed(exchange_t *ex);

/* Starts the next attempt on the best node left. False when none could start; then a wait
 * for a token may have been scheduled (retry_at). */
static bool start_next(exchange_t *ex, bool hedge)
{
    uint64_t now = uv_now(ex->rp->loop), wait;
    while (!ex->finished && ex->started < ex->s.max_attempts) {
        bm_node_t *node = next_node(ex, hedge, now, &wait);
        if (!node) {
            if (wait && !hedge && now + wait < ex->s.deadline) {
                ex->retry_at = now + wait; /* a bucket or a Retry-After: wait for a token */
                ex->rp->c.bucket_waits++;
                arm_timer(ex);
            }
            return false;
        }
        if (launch(ex, node, hedge))
            return true;
    }
    return false;
}

/* The delay before round n (1 for the first round after every node was asked): delay x
 * backoff^(n-1), at most maxDelay, plus up to `jitter` at random. */
static uint64_t retry_delay(exchange_t *ex, uint32_t n)
{
    double d = ex->s.delay_ms;
    for (uint32_t i = 1; i < n && d < ex->s.max_delay_ms; i++)
        d *= ex->s.backoff_milli / 1000.0;
    if (d > ex->s.max_delay_ms)
        d = ex->s.max_delay_ms;
    if (ex->s.jitter_ms)
        d += (double)(bm_rng_next(&ex->rp->rng) % (ex->s.jitter_ms + 1));
    return (uint64_t)d;
}

/*
 * After an attempt failed with nothing else running: the next node at once (moving to
 * another node is no reason to wait); when every candidate was asked, a new round over them
 * after the retry delay, while attempts and time remain; else the answer of failure.
 */
static void after_failure(exchange_t *ex)
{
    if (ex->finished || ex->running > 0 || ex->retry_at)
        return;
    if (ex->started < ex->s.max_attempts) {
        if (start_next(ex, false)) {
            ex->rp->c.retries++;
            return;
        }
        if (ex->retry_at)
            return; /* a node only lacks a token: waiting for it */
        uint64_t at = uv_now(ex->rp->loop) + retry_delay(ex, ++ex->rounds);
        if (at < ex->s.deadline && ex->tried) {
            ex->tried = 0; /* the nodes may be asked again: they failed transiently */
            ex->retry_at = at;
            ex->rp->c.retries++;
            arm_timer(ex);
            return;
        }
    }
    answer_failure(ex);
}

/* The deadline bounds the whole exchange, so a dripping node cannot hold the client: it has
 * part of the answer, so its connection is cut before the body's end (HTTP/1.1's "truncated"). */
static void cut_at_deadline(exchange_t *ex)
{
    const char *node = ex->winner >= 0 ? ex->at[ex->winner].node->id : "?";
    bm_log_limited(&ex->rp->limit, BM_LOG_WARN,
                   "%s %.*s via %s: the answer was not complete within the %u ms deadline; the "
                   "client's connection is cut (routeRules[].timeout serves slow routes)",
                   ex->v.method, (int)ex->v.path_len, ex->v.path, node, ex->s.timeout_ms);
    cancel_all(ex, -1);
    if (ex->fetch)
        reply_error(ex, 504, "%s: answer not complete within %u ms", node, ex->s.timeout_ms);
    else
        bm_resp_abort(ex->req);
    finished(ex);
}

static void on_timer(exchange_t *ex)
{
    uint64_t now = uv_now(ex->rp->loop);
    ex->busy++;
    if (!ex->finished && now >= ex->s.deadline && !ex->event_stream) {
        ex->timed_out = true;
        ex->rp->c.deadline_exceeded++;
        if (ex->committed) {
            cut_at_deadline(ex);
        } else if (ex->winner >= 0 && ex->at[ex->winner].phase == AT_HELD &&
                   ex->at[ex->winner].xfer) {
            /* chosen but not complete: nothing reached the client, so a clean 504 */
            add_error(ex, "%s: its answer was not complete", ex->at[ex->winner].node->id);
            cancel_all(ex, -1);
            answer_failure(ex);
        } else {
            cancel_all(ex, -1);
            if (ex->s.query)
                consensus_failed(ex); /* no agreement by the deadline */
            else
                answer_failure(ex);
        }
    }
    if (!ex->finished && ex->hedge_at && now >= ex->hedge_at) {
        ex->hedge_at = 0;
        if (ex->winner < 0 && ex->running > 0 && ex->hedges < ex->s.hedge_max) {
            if (!bm_hedge_budget_spend(&ex->rp->budget)) {
                ex->rp->c.hedges_refused++;
            } else if (start_next(ex, true)) {
                ex->hedges++;
                ex->rp->c.hedges++;
                if (ex->hedges < ex->s.hedge_max)
                    ex->hedge_at = now + ex->s.hedge_delay_ms;
            }
        }
    }
    if (!ex->finished && ex->retry_at && now >= ex->retry_at) {
        ex->retry_at = 0;
        if (!start_next(ex, false) && !ex->retry_at && ex->running == 0)
            answer_failure(ex);
    }
    arm_timer(ex);
    leave(ex);
}

/* Lists the exchange for the earliest of the deadline, the hedge and the retry (once an answer
 * is committed, only the deadline: it bounds the whole exchange, the body included). */
static void arm_timer(exchange_t *ex)
{
    if (ex->finished || (ex->committed && ex->event_stream)) {
        unschedule(ex); /* an event stream is open-ended; the silence bound holds */
        return;
    }
    uint64_t at = ex->s.deadline;
    if (!ex->committed && ex->hedge_at && ex->hedge_at < at)
        at = ex->hedge_at;
    if (!ex->committed && ex->retry_at && ex->retry_at < at)
        at = ex->retry_at;
    if (at != ex->due.at)
        bm_duelist_schedule(ex->rp->due, &ex->due, at ? at : 1);
}

/* ---- the nodes' answers -------------------------------------------------------------- */

/* Is a non-5xx answer one to move on from? Sets the node's memory (429, 415) as it goes. */
static bool moves_on(exchange_t *ex, attempt_t *a, int status, const bm_answer_head_t *hi)
{
    bm_readpath_t *rp = ex->rp;
    node_state_t *ns = &rp->node[a->node->index];
    uint64_t now = uv_now(rp->loop);
    if (status == 429) {
        rp->c.throttled++;
        bm_aimd_throttled(&ns->bucket, bm_answer_retry_after_ms(hi->retry_after, COOLDOWN_429_MS),
                          now);
        add_error(ex, "%s: HTTP 429 (throttled)", a->node->id);
        return true;
    }
    if (status == 404 && ex->fetch && ex->fetch->missing_moves_on) {
        /* a root of the cluster chain this node has not imported yet (one slot behind) */
        add_error(ex, "%s: HTTP 404 (not imported yet)", a->node->id);
        return true;
    }
    if (status == 415 && ex->ssz_accept) {
        rp->c.ssz_refused++;
        remember_no_ssz(ns, ex->route_key, now);
        add_error(ex, "%s: HTTP 415 (no SSZ)", a->node->id);
        return true;
    }
    if (ex->hist.kind == BM_HIST_NONE || ns->o.archive || !ex->is_read)
        return false;
    if (status == 400 && ex->hist.kind == BM_HIST_BLOB && archive_available(ex)) {
        a->inspect = true; /* custody or not: the body says */
        return true;
    }
    if (status == 404 && bm_archive_pruned_answer(&ex->hist, 404, NULL, 0, UINT64_MAX)) {
        if (!archive_available(ex)) {
            rp->c.archive_missing++;
            return false;
        }
        a->pruned = true;
        return true;
    }
    return false;
}

static void on_head(bm_xfer_t *x, int status, const bm_hdrs_t *headers, void *ud)
{
    attempt_t *a = ud;
    exchange_t *ex = a->ex;
    (void)x;
    ex->busy++;
    bm_answer_head_t hi;
    bm_answer_head_scan(headers, &hi);
    a->status = status;
    a->length = bm_answer_head_length(&hi);
    if (hi.connection_lists) {
        bm_answer_head_copy(&a->hdrs, headers, &hi);
        a->view = NULL;
    } else {
        a->view = headers; /* the server drops Connection and the other hop-by-hop fields */
    }
    bm_str_clear(&a->body);
    if (ex->s.query) {
        a->phase = AT_HELD; /* consensus: every answer is compared whole */
    } else if (status >= 500 || moves_on(ex, a, status, &hi)) {
        a->phase = AT_KEEP;
    } else {
        ex->winner = (int)(a - ex->at);
        a->phase = AT_HELD;
        if (a->hedge)
            ex->rp->c.hedges_won++;
        if (ex->sticky) /* the client sticks to the node that answered it */
            stick(ex->rp, ex->sticky_key, a->node->index, uv_now(ex->rp->loop));
        cancel_all(ex, ex->winner); /* the first usable answer wins */
        ex->hedge_at = 0;
        bool sse = hi.content_type && strncasecmp(hi.content_type, "text/event-stream", 17) == 0;
        if (ex->fetch && (sse || a->length > (int64_t)ex->fetch->max_bytes))
            reply_too_big(ex);
        else if (sse || a->length > (int64_t)ex->rp->opts.hold_bytes) {
            ex->event_stream = sse;
            commit(ex, a);
        } else if (a->length > 0)
            bm_str_reserve(&a->body, (size_t)a->length);
        arm_timer(ex);
    }
    leave(ex);
}

static int on_data(bm_xfer_t *x, const char *p, size_t n, void *ud)
{
    attempt_t *a = ud;
    exchange_t *ex = a->ex;
    int rc = 0;
    (void)x;
    ex->busy++;
    switch (a->phase) {
    case AT_HELD:
        bm_str_append(&a->body, p, n);
        if (ex->s.query) {
            if (bm_str_len(&a->body) > MAX_CONSENSUS_BODY)
                rc = BM_XFER_PAUSE; /* on_done cannot come: the timer's deadline decides */
        } else if (ex->fetch) {
            if (bm_str_len(&a->body) > ex->fetch->max_bytes)
                reply_too_big(ex);
        } else if (bm_str_len(&a->body) > ex->rp->opts.hold_bytes) {
            commit(ex, a);
        }
        break;
    case AT_STREAM:
        if (!ex->finished)
            bm_resp_write_copy(ex->req, p, n);
        break;
    case AT_KEEP:
        if (bm_str_len(&a->body) < MAX_KEPT_BODY) {
            size_t room = MAX_KEPT_BODY - bm_str_len(&a->body);
            bm_str_append(&a->body, p, n < room ? n : room);
        }
        break;
    default:
        break;
    }
    if (a->phase == AT_STREAM && !ex->finished && !bm_resp_writable(ex->req)) {
        ex->paused = true;
        rc = BM_XFER_PAUSE;
    }
    leave(ex);
    return rc;
}

/* Records the end of an attempt in the pool (figures, reachability), the node's breaker
 * and its bucket, and logs a failure (rate-limited). */
static void record(exchange_t *ex, attempt_t *a, const bm_xfer_result_t *res)
{
    bm_readpath_t *rp = ex->rp;
    bm_node_t *node = a->node;
    node_state_t *ns = &rp->node[node->index];
    bm_outcome_t outcome = res->err             ? BM_OUTCOME_NET_ERROR
                           : res->status >= 500 ? BM_OUTCOME_HTTP_5XX
                                                : BM_OUTCOME_OK;
    const char *detail = res->detail && *res->detail ? res->detail : bm_strerror(res->err);
    node->stats.in_flight--;
    bm_pool_record(rp->pool, node, outcome, res->err == BM_ECONNREFUSED, res->elapsed_us,
                   res->err ? detail : NULL);
    bm_breaker_done(&ns->breaker, outcome != BM_OUTCOME_OK, false, uv_now(rp->loop));
    if (outcome == BM_OUTCOME_OK && res->status != 429)
        bm_aimd_success(&ns->bucket);
    if (outcome == BM_OUTCOME_OK)
        return;
    size_t plen = ex->v.path_len;
    const char *path = ex->v.path;
    if (res->err)
        bm_log_limited(&rp->limit, BM_LOG_WARN, "%s %.*s via %s: %s", ex->v.method, (int)plen, path,
                       node->id, detail);
    else
        bm_log_limited(&rp->limit, BM_LOG_WARN, "%s %.*s via %s: HTTP %d", ex->v.method, (int)plen,
                       path, node->id, res->status);
}

/* ---- consensus ------------------------------------------------------------------------ */

static bool same_answer(const attempt_t *a, const attempt_t *b)
{
    const char *ct = bm_hdrs_get(answer_fields(a), "content-type");
    bool ssz = bm_content_type_is_ssz(ct);
    return a->status == b->status &&
           bm_canon_equal(bm_str_data(&a->body), bm_str_len(&a->body), bm_str_data(&b->body),
                          bm_str_len(&b->body), ssz);
}

/* The finished answers that agree with at[i], counted. */
static size_t agreeing(const exchange_t *ex, int i)
{
    size_t n = 0;
    for (int j = 0; j < MAX_PARALLEL; j++)
        if (ex->at[j].done && !ex->at[j].failed && same_answer(&ex->at[i], &ex->at[j]))
            n++;
    return n;
}

/* No agreement: 502 naming each node with the group of its answer (or its failure). */
static void consensus_failed(exchange_t *ex)
{
    bm_str_t who = BM_STR_INIT;
    int group[MAX_PARALLEL];
    int groups = 0;
    for (int i = 0; i < MAX_PARALLEL; i++) {
        group[i] = -1;
        const attempt_t *a = &ex->at[i];
        if (!a->done || a->failed)
            continue;
        for (int j = 0; j < i && group[i] < 0; j++)
            if (group[j] >= 0 && same_answer(a, &ex->at[j]))
                group[i] = group[j];
        if (group[i] < 0)
            group[i] = groups++;
        bm_str_printf(&who, "%s%s: answer %c (HTTP %d)", bm_str_len(&who) ? ", " : "", a->node->id,
                      'A' + group[i] % 26, a->status);
    }
    ex->rp->c.consensus_failed++;
    reply_error(ex, 502, "no consensus: %u of %u nodes must agree; %s%s%s", ex->s.agree,
                ex->s.query, bm_str_len(&who) ? bm_str_data(&who) : "no answer",
                bm_str_len(&ex->errors) ? "; failed: " : "",
                bm_str_len(&ex->errors) ? bm_str_data(&ex->errors) : "");
    bm_str_dispose(&who);
    finished(ex);
}

static void consensus_done(exchange_t *ex, attempt_t *a, const bm_xfer_result_t *res)
{
    a->done = true;
    a->failed = res->err || res->status >= 500 || bm_str_len(&a->body) > MAX_CONSENSUS_BODY;
    if (a->failed) {
        if (res->err)
            add_error(ex, "%s: %s", a->node->id, bm_strerror(res->err));
        else
            add_error(ex, "%s: HTTP %d", a->node->id, res->status);
        start_next(ex, false); /* a replacement, while attempts and nodes remain */
    } else if (agreeing(ex, (int)(a - ex->at)) >= ex->s.agree) {
        ex->rp->c.consensus_agreed++;
        ex->winner = (int)(a - ex->at);
        send_attempt(ex, a);
        return;
    }
    if (ex->running == 0 && !ex->retry_at)
        consensus_failed(ex);
}

static void start_consensus(exchange_t *ex)
{
    for (uint32_t i = 0; i < ex->s.query; i++)
        if (!start_next(ex, false))
            break;
    if (ex->running == 0 && !ex->retry_at)
        answer_failure(ex);
}

/* ---- an attempt's end ---------------------------------------------------------------- */

/* A failed attempt whose answer is kept to relay if nothing better comes. */
static void keep_failed(exchange_t *ex, attempt_t *a)
{
    if (ex->kept >= 0 && ex->kept != (int)(a - ex->at)) {
        attempt_t *old = &ex->at[ex->kept];
        old->phase = AT_IDLE;
    }
    ex->kept = (int)(a - ex->at);
}

static void on_done(bm_xfer_t *x, const bm_xfer_result_t *res, void *ud)
{
    attempt_t *a = ud;
    exchange_t *ex = a->ex;
    (void)x;
    ex->busy++;
    a->xfer = NULL;
    ex->running--;
    record(ex, a, res);
    bool is_winner = ex->winner == (int)(a - ex->at);
    if (ex->finished) {
        /* the client went away or another answer was sent */
    } else if (ex->s.query) {
        consensus_done(ex, a, res);
    } else if (is_winner && ex->committed && ex->fetch) {
        if (res->err)
            reply_error(ex, 502, "%s: the answer broke off: %s", a->node->id,
                        bm_strerror(res->err));
        else
            send_attempt(ex, a);
        finished(ex);
    } else if (is_winner && ex->committed) {
        if (res->err)
            bm_resp_abort(ex->req); /* never splice: the client sees a broken connection */
        else
            bm_resp_end(ex->req);
        finished(ex);
    } else if (is_winner && !res->err) {
        send_attempt(ex, a); /* the whole answer arrived while held: its exact length */
    } else {
        if (is_winner)
            ex->winner = -1; /* died mid-body while held: another node may still answer */
        if (res->err == BM_EPROTO) {
            /* a broken answer (101 or another unasked 1xx, a bad head or length): the
             * node's 502, and the next node is asked as after a 5xx */
            ex->invalid = true;
            add_error(ex, "%s: invalid answer (%s)", a->node->id,
                      res->detail && *res->detail ? res->detail : bm_strerror(res->err));
            a->phase = AT_IDLE;
        } else if (res->err) {
            add_error(ex, "%s: %s", a->node->id, bm_strerror(res->err));
            a->phase = AT_IDLE;
            if (!ex->is_read && res->err == BM_ECONNREFUSED && ex->s.max_attempts < 2)
                ex->s.max_attempts = 2; /* nothing was sent: one more node may take it */
        } else if (a->inspect &&
                   !bm_archive_pruned_answer(&ex->hist, res->status, bm_str_data(&a->body),
                                             bm_str_len(&a->body), UINT64_MAX)) {
            send_attempt(ex, a); /* an ordinary 400: the answer */
        } else {
            if (a->inspect || a->pruned) {
                ex->archive_only = true; /* the rest of the attempts go to archive nodes */
                ex->rp->c.archive_fallthrough++;
                add_error(ex, "%s: HTTP %d (pruned)", a->node->id, res->status);
            } else if (res->status >= 500) {
                add_error(ex, "%s: HTTP %d", a->node->id, res->status);
            }
            keep_failed(ex, a);
        }
        if (!ex->finished && (a->pruned || a->inspect) && ex->running == 0) {
            /* straight to an archive node: a pruned answer is no fault of the node */
            if (!start_next(ex, false) && !ex->retry_at)
                answer_failure(ex);
        } else {
            after_failure(ex);
        }
    }
    own_fields(ex, a); /* a kept or compared answer outlives its transfer */
    leave(ex);
}

static const bm_xfer_cbs_t xfer_cbs = {on_head, on_data, on_done};

/* ---- requests ------------------------------------------------------------------------ */

static uint32_t pick_u32(uint32_t rule, uint32_t dflt)
{
    return rule == BM_RULE_INHERIT ? dflt : rule;
}

/* The exchange's settings: the failsafe values, overridden by its rule. */
static void resolve(exchange_t *ex, const bm_rule_t *r, bool heavy)
{
    const bm_readpath_opts_t *o = &ex->rp->opts;
    settings_t *s = &ex->s;
    bool rule_hedge =
        r && (r->hedge_delay_ms != BM_RULE_INHERIT || r->hedge_max_count != BM_RULE_INHERIT);
    /* a full state or every validator takes minutes to send: its own default deadline */
    uint32_t deadline = heavy ? o->heavy_timeout_ms : o->timeout_ms;
    s->timeout_ms = r ? pick_u32(r->timeout_ms, deadline) : deadline;
    s->max_attempts = r ? pick_u32(r->max_attempts, o->max_attempts) : o->max_attempts;
    s->delay_ms = r ? pick_u32(r->delay_ms, o->retry_delay_ms) : o->retry_delay_ms;
    s->backoff_milli =
        r ? pick_u32(r->backoff_milli, o->retry_backoff_milli) : o->retry_backoff_milli;
    s->max_delay_ms = r ? pick_u32(r->max_delay_ms, o->retry_max_delay_ms) : o->retry_max_delay_ms;
    s->jitter_ms = r ? pick_u32(r->jitter_ms, o->retry_jitter_ms) : o->retry_jitter_ms;
    s->hedge_delay_ms = r ? pick_u32(r->hedge_delay_ms, o->hedge_delay_ms) : o->hedge_delay_ms;
    s->hedge_max = r ? pick_u32(r->hedge_max_count, o->hedge_max_count) : o->hedge_max_count;
    if ((heavy && !rule_hedge) || !ex->is_read)
        s->hedge_max = 0; /* heavy reads load the nodes the duty races need; writes never */
    s->strategy = r && r->strategy >= 0 ? (bm_balance_strategy_t)r->strategy : o->strategy;
    if (r && r->restrict_nodes) {
        s->restrict_nodes = true;
        s->nodes &= r->nodes;
    }
    if (r && r->consensus_query && ex->is_read) {
        s->query = r->consensus_query < MAX_PARALLEL ? r->consensus_query : MAX_PARALLEL;
        s->agree = r->consensus_agree;
        s->max_attempts = s->query + s->max_attempts - 1;
        s->hedge_max = 0;
    }
    if (!ex->is_read)
        s->max_attempts = 1; /* a write is sent once (a refused connection aside) */
    if (s->max_attempts + s->hedge_max > MAX_PARALLEL)
        s->max_attempts = MAX_PARALLEL - s->hedge_max;
    s->max_attempts += s->hedge_max; /* hedges count as attempts */
    s->deadline = uv_now(ex->rp->loop) + s->timeout_ms;
}

/* Archive routing of a read: what its path asks for, and whether archive nodes come first. */
static void classify_history(exchange_t *ex)
{
    bm_readpath_t *rp = ex->rp;
    const bm_chain_info_t *c = rp->disc ? bm_discovery_chain(rp->disc) : NULL;
    uint32_t spe = c ? c->clock.slots_per_epoch : 32;
    size_t n = ex->v.path_len;
    const char *path = ex->v.path;
    bm_archive_classify(path + ex->target_off, n - ex->target_off, spe, &ex->hist);
    if (ex->hist.kind == BM_HIST_NONE || !c)
        return;
    uint64_t slot = bm_slot_at(&c->clock, bm_clock_now_ms());
    if (bm_archive_beyond_retention(&ex->hist, &rp->opts.retention, slot, spe) &&
        archive_available(ex)) {
        ex->archive_first = true;
        rp->c.archive_routed++;
    }
}

static void sticky_key(exchange_t *ex)
{
    bm_readpath_t *rp = ex->rp;
    const char *k =
        rp->opts.sticky_header ? bm_hdrs_get(ex->v.headers, rp->opts.sticky_header) : ex->v.peer;
    if (!k)
        return; /* no such header: balanced as any other request */
    ex->sticky = true;
    ex->sticky_key = bm_sticky_key(k, strlen(k));
}

static bool accepts_ssz(const bm_hdrs_t *h)
{
    const char *a = bm_hdrs_get(h, "accept");
    return a && strcasestr(a, "application/octet-stream") != NULL;
}

/* A new exchange of `rp` for what `v` describes, with its rule resolved; NULL when the path
 * is blocked (*blocked set) or memory ran out. */
static exchange_t *exchange_new(bm_readpath_t *rp, const view_t *v, size_t target_off,
                                bool *blocked)
{
    const char *method = v->method;
    size_t n = v->path_len;
    const bm_rule_t *rule = bm_rules_match(rp->rules, method, v->path + target_off, n - target_off);
    *blocked = bm_rules_blocked(rp->rules, v->path, n) || (rule && rule->blocked);
    if (*blocked) {
        rp->c.blocked++;
        return NULL;
    }
    exchange_t *ex = exchange_alloc(rp);
    if (!ex)
        return NULL;
    ex->rp = rp;
    ex->v = *v;
    ex->winner = ex->kept = -1;
    ex->target_off = target_off;
    ex->s.nodes = ~0ull;
    ex->is_read = bm_rules_is_read(method, v->path, n);
    ex->ssz_accept = accepts_ssz(v->headers);
    if (ex->ssz_accept)
        ex->route_key = bm_rules_route_key(method, v->path + target_off, n - target_off);
    bool heavy = bm_rules_is_heavy(method, v->path, n, v->query, v->query_len,
                                   v->body ? v->body->data : NULL, v->body ? v->body->len : 0);
    resolve(ex, rule, heavy);
    return ex;
}

/* Starts the exchange's first attempts (the settings are final). */
static void exchange_start(exchange_t *ex)
{
    bm_readpath_t *rp = ex->rp;
    rp->active++;
    rp->c.reads++;
    if (ex->is_read)
        classify_history(ex);
    if (rp->sticky && !ex->s.query)
        sticky_key(ex);
    ex->busy++;
    if (ex->req) {
        bm_req_on_abort(ex->req, on_client_abort, ex);
        bm_resp_on_drain(ex->req, on_client_drain, ex);
    }
    if (ex->is_read)
        bm_hedge_budget_earn(&rp->budget);
    if (ex->s.query) {
        start_consensus(ex);
    } else if (start_next(ex, false)) {
        if (ex->s.hedge_max)
            ex->hedge_at = uv_now(rp->loop) + ex->s.hedge_delay_ms;
    } else if (!ex->retry_at) {
        answer_failure(ex);
    }
    arm_timer(ex);
}

/* Starts an exchange for `req`; `client`, `nodes`, `target_off` and `strip` come from its
 * client route, `ready_only` from the caller. */
static void handle(bm_readpath_t *rp, bm_req_t *req, int client, bool restrict_nodes,
                   uint64_t nodes, size_t target_off, bool strip, bool ready_only)
{
    view_t v = {.method = bm_req_method(req),
                .target = bm_req_target(req),
                .peer = bm_req_peer(req),
                .headers = bm_req_headers(req),
                .body = bm_req_body(req)};
    v.path = bm_req_path(req, &v.path_len);
    v.query = bm_req_query(req, &v.query_len);
    bool blocked;
    exchange_t *ex = exchange_new(rp, &v, target_off, &blocked);
    if (!ex) {
        if (blocked)
            bm_resp_error(req, 403, "this path is blocked by the configuration of beaconmux");
        else
            bm_resp_error(req, 500, "out of memory");
        return;
    }
    ex->req = req;
    ex->strip = strip;
    ex->s.client = client;
    ex->s.restrict_nodes |= restrict_nodes;
    if (restrict_nodes)
        ex->s.nodes &= nodes;
    ex->s.ready_only = ready_only;
    exchange_start(ex);
    leave(ex);
}

bm_readpath_fetch_t *bm_readpath_fetch(bm_readpath_t *rp, const bm_readpath_fetch_req_t *f,
                                       bm_readpath_answer_fn cb, void *ud)
{
    detached_t *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    bm_str_puts(&d->method, f->method);
    bm_str_puts(&d->target, f->target);
    bm_str_puts(&d->peer, f->peer ? f->peer : "");
    bm_hdrs_init(&d->headers);
    if (f->headers)
        for (size_t i = 0; i < f->headers->n; i++)
            bm_hdrs_add(&d->headers, f->headers->items[i].name, f->headers->items[i].name_len,
                        f->headers->items[i].value, f->headers->items[i].value_len);
    d->max_bytes = f->max_bytes ? f->max_bytes : rp->opts.hold_bytes;
    d->missing_moves_on = f->missing_moves_on;
    d->cb = cb;
    d->ud = ud;
    view_t v = {.method = bm_str_data(&d->method),
                .target = bm_str_data(&d->target),
                .peer = bm_str_data(&d->peer),
                .headers = &d->headers};
    const char *q = strchr(v.target, '?');
    v.path = v.target;
    v.path_len = q ? (size_t)(q - v.target) : strlen(v.target);
    v.query = q ? q + 1 : NULL;
    v.query_len = q ? strlen(q + 1) : 0;
    bool blocked = false;
    exchange_t *ex =
        d->method.oom || d->target.oom || d->peer.oom ? NULL : exchange_new(rp, &v, 0, &blocked);
    if (!ex) {
        detached_free(d);
        return NULL;
    }
    ex->fetch = d;
    exchange_start(ex);
    bool done = ex->finished;
    leave(ex);
    return done ? NULL : (bm_readpath_fetch_t *)ex;
}

void bm_readpath_fetch_cancel(bm_readpath_fetch_t *f)
{
    exchange_t *ex = (exchange_t *)f;
    if (!ex || ex->finished)
        return;
    ex->busy++;
    ex->fetch->cb = NULL;
    finished(ex);
    leave(ex);
}

void bm_readpath_route(bm_req_t *req, const bm_route_params_t *params, void *ud)
{
    bm_readpath_t *rp = ud;
    size_t n, rest;
    (void)params;
    const char *path = bm_req_path(req, &n);
    const bm_client_route_t *r = bm_rules_client_route(rp->rules, path, n, &rest);
    if (!r) {
        handle(rp, req, 0, false, 0, 0, false, false);
        return;
    }
    handle(rp, req, r->client, r->client == 0, r->nodes, r->strip_prefix ? rest : 0,
           r->strip_prefix, false);
}

void bm_readpath_handle_ready(bm_readpath_t *rp, bm_req_t *req)
{
    handle(rp, req, 0, false, 0, 0, false, true);
}

/* ---- status -------------------------------------------------------------------------- */

void bm_readpath_node_json(bm_readpath_t *rp, size_t i, bm_str_t *o)
{
    const bm_node_t *n = bm_pool_node(rp->pool, i);
    if (!n || i >= BM_MAX_NODES)
        return;
    node_state_t *ns = &rp->node[i];
    bm_score_terms_t t;
    node_terms(rp, n, &t);
    uint64_t now = uv_now(rp->loop);
    bm_str_printf(o,
                  ",\"read\":{\"priority\":%u,\"weight\":%u,\"archive\":%s,\"score\":%.6g,"
                  "\"terms\":{\"errorRate\":%.4f,\"latency\":%.4f,\"headLag\":%.4f,"
                  "\"syncDistance\":%.4f},\"error_rate\":%.4f,\"latency_p90_ms\":%.3f,"
                  "\"breaker\":\"%s\",\"breaker_opens\":%llu,\"throttled\":%llu",
                  ns->o.priority, ns->o.weight, ns->o.archive ? "true" : "false", t.score,
                  t.error_rate, t.latency, t.head_lag, t.sync_distance,
                  bm_node_recent_error_rate(n), bm_node_recent_latency_ms(n, 90),
                  bm_breaker_state_name(ns->breaker.state), (unsigned long long)ns->breaker.opens,
                  (unsigned long long)ns->bucket.throttled);
    if (bm_aimd_enabled(&ns->bucket))
        bm_str_printf(o, ",\"bucket\":{\"rate\":%.2f,\"min\":%.0f,\"max\":%.0f}", ns->bucket.rate,
                      ns->bucket.min, ns->bucket.max);
    uint64_t closed = ns->bucket.closed_until_ms > now ? ns->bucket.closed_until_ms - now : 0;
    bm_str_printf(o, ",\"retry_after_ms\":%llu}", (unsigned long long)closed);
}
