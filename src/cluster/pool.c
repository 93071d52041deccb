/* SPDX-License-Identifier: MIT */
/*
 * pool: node storage, state transitions with their log line and listeners, figures, and
 * the small vocabularies (state and client names, client detection) the rest shares.
 */
#include "cluster/pool.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/log.h"
#include "base/url.h"

#define MAX_LISTENERS 8

struct bm_pool {
    bm_node_t **nodes;
    size_t n;
    size_t cap;
    struct {
        bm_pool_state_fn fn;
        void *ud;
    } listeners[MAX_LISTENERS];
    size_t n_listeners;
    struct {
        bm_pool_input_fn fn;
        void *ud;
    } inputs[MAX_LISTENERS];
    size_t n_inputs;
};

/* Upper bounds of the latency buckets, in ms; the last one is open. */
static const double bucket_ms[BM_LATENCY_BUCKETS] = {
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 60000, INFINITY};

bm_pool_t *bm_pool_new(void)
{
    return calloc(1, sizeof(bm_pool_t));
}

static void node_free(bm_node_t *n)
{
    free(n->id);
    free(n->url);
    free(n->url_masked);
    free(n->version);
    bm_hdrs_dispose(&n->extra);
    free(n);
}

void bm_pool_free(bm_pool_t *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->n; i++)
        node_free(p->nodes[i]);
    free(p->nodes);
    free(p);
}

bm_node_t *bm_pool_add(bm_pool_t *p, const char *id, const char *url, const bm_hdrs_t *extra)
{
    if (!bm_url_valid(url) || !id || !*id || bm_pool_find(p, id))
        return NULL;
    bm_node_t **nodes = bm_grow(p->nodes, p->n, &p->cap, sizeof *nodes, 4);
    if (!nodes)
        return NULL;
    p->nodes = nodes;
    bm_node_t *n = calloc(1, sizeof *n);
    if (!n)
        return NULL;
    bm_str_t masked = BM_STR_INIT;
    bm_url_mask(&masked, url);
    bm_buf_t *mb = bm_str_finish(&masked);
    n->index = (int)p->n;
    n->id = strdup(id);
    n->url = strdup(url);
    n->url_masked = mb ? strdup(mb->data) : NULL;
    bm_buf_unref(mb);
    bm_hdrs_init(&n->extra);
    if (!n->id || !n->url || !n->url_masked || (extra && bm_hdrs_copy(&n->extra, extra) != 0)) {
        node_free(n);
        return NULL;
    }
    n->state = BM_NODE_UNKNOWN;
    n->reachable = true; /* until proven otherwise: the first contact decides */
    snprintf(n->state_reason, sizeof n->state_reason, "not contacted yet");
    n->state_since_ms = bm_clock_now_ms();
    p->nodes[p->n++] = n;
    return n;
}

size_t bm_pool_count(const bm_pool_t *p)
{
    return p->n;
}

bm_node_t *bm_pool_node(const bm_pool_t *p, size_t i)
{
    return i < p->n ? p->nodes[i] : NULL;
}

bm_node_t *bm_pool_find(const bm_pool_t *p, const char *id)
{
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->nodes[i]->id, id) == 0)
            return p->nodes[i];
    return NULL;
}

void bm_pool_set_state(bm_pool_t *p, bm_node_t *n, bm_node_state_t state, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(n->state_reason, sizeof n->state_reason, fmt, ap);
    va_end(ap);
    if (n->state == state)
        return;
    bm_node_state_t old = n->state;
    n->state = state;
    n->state_since_ms = bm_clock_now_ms();
    bm_log(state == BM_NODE_READY ? BM_LOG_INFO : BM_LOG_WARN, "upstream %s (%s): %s -> %s: %s",
           n->id, n->url_masked, bm_node_state_name(old), bm_node_state_name(state),
           n->state_reason);
    for (size_t i = 0; i < p->n_listeners; i++)
        p->listeners[i].fn(n, old, p->listeners[i].ud);
}

int bm_pool_on_state(bm_pool_t *p, bm_pool_state_fn fn, void *ud)
{
    if (p->n_listeners == MAX_LISTENERS)
        return BM_ENOMEM;
    p->listeners[p->n_listeners].fn = fn;
    p->listeners[p->n_listeners].ud = ud;
    p->n_listeners++;
    return 0;
}

int bm_pool_on_input(bm_pool_t *p, bm_pool_input_fn fn, void *ud)
{
    if (p->n_inputs == MAX_LISTENERS)
        return BM_ENOMEM;
    p->inputs[p->n_inputs].fn = fn;
    p->inputs[p->n_inputs].ud = ud;
    p->n_inputs++;
    return 0;
}

static void inputs_changed(bm_pool_t *p, bm_node_t *n)
{
    for (size_t i = 0; i < p->n_inputs; i++)
        p->inputs[i].fn(n, p->inputs[i].ud);
}

const char *bm_node_input_reason(const bm_node_t *n)
{
    return n->input_reason;
}

const char *bm_node_reach_reason(const bm_node_t *n)
{
    return n->reach_reason;
}

void bm_pool_set_network(bm_pool_t *p, bm_node_t *n, bm_network_verdict_t verdict, const char *fmt,
                         ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(n->input_reason, sizeof n->input_reason, fmt, ap);
    va_end(ap);
    if (n->network == verdict)
        return;
    n->network = verdict;
    inputs_changed(p, n);
}

void bm_pool_set_unresponsive(bm_pool_t *p, bm_node_t *n, const char *fmt, ...)
{
    if (!n->reachable)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(n->reach_reason, sizeof n->reach_reason, fmt, ap);
    va_end(ap);
    n->reachable = false;
    inputs_changed(p, n);
}

/* The first position in sorted v[0..n) whose value is above x (upper) or not below x. */
static uint32_t sorted_position(const uint32_t *v, uint32_t n, uint32_t x, bool upper)
{
    uint32_t lo = 0, hi = n;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (upper ? v[mid] <= x : v[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Replaces `old` (when `evict`) with `x` in v[0..n), the sorted copy of the latency window: one
 * binary search and one short move each, instead of a sort per percentile asked. */
static void sorted_replace(uint32_t *v, uint32_t n, bool evict, uint32_t old, uint32_t x)
{
    if (evict) {
        uint32_t at = sorted_position(v, n, old, false); /* present: it was inserted */
        memmove(v + at, v + at + 1, (n - at - 1) * sizeof v[0]);
        n--;
    }
    uint32_t at = sorted_position(v, n, x, true);
    memmove(v + at + 1, v + at, (n - at) * sizeof v[0]);
    v[at] = x;
}

/* Pushes one outcome (and, for a success, its latency) into the rolling windows. */
static void record_recent(bm_node_stats_t *s, bool failed, uint64_t latency_us)
{
    uint64_t bit = 1ull << s->recent_pos;
    s->recent_failed = failed ? s->recent_failed | bit : s->recent_failed & ~bit;
    s->recent_pos = (s->recent_pos + 1) % BM_RECENT_WINDOW;
    if (s->recent_n < BM_RECENT_WINDOW)
        s->recent_n++;
    if (failed)
        return;
    uint32_t x = latency_us > UINT32_MAX ? UINT32_MAX : (uint32_t)latency_us;
    bool full = s->recent_lat_n == BM_RECENT_WINDOW;
    sorted_replace(s->recent_lat_sorted, s->recent_lat_n, full, s->recent_lat_us[s->recent_lat_pos],
                   x);
    if (!full)
        s->recent_lat_n++;
    s->recent_lat_us[s->recent_lat_pos] = x;
    s->recent_lat_pos = (s->recent_lat_pos + 1) % BM_RECENT_WINDOW;
}

double bm_node_recent_error_rate(const bm_node_t *n)
{
    const bm_node_stats_t *s = &n->stats;
    if (s->recent_n == 0)
        return 0;
    return (double)__builtin_popcountll(s->recent_failed) / (double)s->recent_n;
}

double bm_node_recent_latency_ms(const bm_node_t *n, double pct)
{
    const bm_node_stats_t *s = &n->stats;
    uint32_t k = s->recent_lat_n;
    if (k == 0)
        return 0;
    uint32_t idx = (uint32_t)ceil((double)k * pct / 100.0);
    idx = idx == 0 ? 0 : idx - 1;
    if (idx >= k)
        idx = k - 1;
    return (double)s->recent_lat_sorted[idx] / 1000.0;
}

void bm_pool_record(bm_pool_t *p, bm_node_t *n, bm_outcome_t outcome, bool refused,
                    uint64_t latency_us, const char *detail)
{
    bm_node_stats_t *s = &n->stats;
    s->requests++;
    record_recent(s, outcome != BM_OUTCOME_OK, latency_us);
    if (outcome == BM_OUTCOME_NET_ERROR) {
        s->errors++;
        s->refused += refused;
        s->consecutive_failures++;
        if (n->reachable && (refused || s->consecutive_failures >= BM_POOL_UNREACHABLE_AFTER)) {
            n->reachable = false;
            snprintf(n->reach_reason, sizeof n->reach_reason, "%s (%u network error%s in a row)",
                     detail && *detail ? detail : "no answer", s->consecutive_failures,
                     s->consecutive_failures == 1 ? "" : "s");
            inputs_changed(p, n);
        }
        return;
    }
    s->consecutive_failures = 0;
    if (!n->reachable) {
        n->reachable = true;
        inputs_changed(p, n);
    }
    if (outcome == BM_OUTCOME_HTTP_5XX) {
        s->errors++;
        s->errors_5xx++;
        return;
    }
    s->last_ok_ms = bm_clock_now_ms();
    double ms = (double)latency_us / 1000.0;
    s->latency_ewma_ms = s->latency_ewma_ms == 0 ? ms : s->latency_ewma_ms * 0.9 + ms * 0.1;
    int b = 0;
    while (b < BM_LATENCY_BUCKETS - 1 && ms > bucket_ms[b])
        b++;
    s->latency_hist[b]++;
    s->latency_sum_us += latency_us;
}

void bm_pool_set_shadow(bm_node_t *n, bool shadow)
{
    n->shadow = shadow;
}

size_t bm_pool_count_state(const bm_pool_t *p, bm_node_state_t state)
{
    size_t c = 0;
    for (size_t i = 0; i < p->n; i++)
        c += !p->nodes[i]->shadow && p->nodes[i]->state == state;
    return c;
}

bool bm_node_usable(const bm_node_t *n)
{
    return !n->shadow && n->state != BM_NODE_WRONG_NETWORK;
}

int bm_node_rank(const bm_node_t *n)
{
    switch (n->state) {
    case BM_NODE_READY:
        return 0;
    case BM_NODE_LAGGING:
    case BM_NODE_NO_HEAD: /* answers; whether it is behind is unknown, not proven */
        return 1;
    case BM_NODE_OPTIMISTIC:
    case BM_NODE_SYNCING:
        return 2;
    case BM_NODE_TIME_DISCREPANCY:
    case BM_NODE_FORKED:
        return 3;
    case BM_NODE_UNKNOWN:
        return 4;
    case BM_NODE_UNREACHABLE:
        return 5;
    default:
        return 100;
    }
}

static bool preferred(const bm_node_t *n, bm_pool_prefer_t prefer)
{
    switch (prefer) {
    case BM_POOL_PREFER_READY:
        return n->state == BM_NODE_READY;
    case BM_POOL_PREFER_REACHABLE:
        return n->reachable;
    case BM_POOL_PREFER_ANSWERING:
        return n->state != BM_NODE_UNREACHABLE;
    case BM_POOL_PREFER_ANY:
        return true;
    }
    return false;
}

size_t bm_pool_candidates(const bm_pool_t *p, bm_pool_prefer_t prefer, bool ranked, bm_node_t **out,
                          size_t cap)
{
    size_t n = 0;
    for (int pass = 0; pass < 2 && n == 0 && cap > 0; pass++)
        for (size_t i = 0; i < p->n; i++) {
            bm_node_t *node = p->nodes[i];
            if (!bm_node_usable(node) || (pass == 0 && !preferred(node, prefer)))
                continue;
            size_t k;
            if (n < cap)
                k = n++;
            else if (ranked && bm_node_rank(out[cap - 1]) > bm_node_rank(node))
                k = cap - 1; /* full: it takes the place of the worst */
            else if (ranked)
                continue;
            else
                break;
            /* insertion keeps pool order among nodes of one rank */
            while (ranked && k > 0 && bm_node_rank(out[k - 1]) > bm_node_rank(node)) {
                out[k] = out[k - 1];
                k--;
            }
            out[k] = node;
        }
    return n;
}

double bm_latency_bucket_ms(int i)
{
    return i >= 0 && i < BM_LATENCY_BUCKETS ? bucket_ms[i] : INFINITY;
}

double bm_node_latency_pct(const bm_node_t *n, double pct)
{
    uint64_t total = 0;
    for (int i = 0; i < BM_LATENCY_BUCKETS; i++)
        total += n->stats.latency_hist[i];
    if (total == 0)
        return 0;
    uint64_t want = (uint64_t)ceil((double)total * pct / 100.0);
    if (want == 0)
        want = 1;
    uint64_t seen = 0;
    for (int i = 0; i < BM_LATENCY_BUCKETS; i++) {
        seen += n->stats.latency_hist[i];
        if (seen >= want)
            return i == BM_LATENCY_BUCKETS - 1 ? bucket_ms[i - 1] : bucket_ms[i];
    }
    return bucket_ms[BM_LATENCY_BUCKETS - 2];
}

const char *bm_node_state_name(bm_node_state_t s)
{
    static const char *const names[BM_NODE_STATE_COUNT] = {
        "unknown",          "ready",       "lagging",       "syncing", "optimistic", "forked",
        "time-discrepancy", "unreachable", "wrong-network", "no-head",
    };
    return (unsigned)s < BM_NODE_STATE_COUNT ? names[s] : "invalid";
}

static const char *const client_names[BM_CLIENT_COUNT] = {
    "unknown", "lighthouse", "prysm", "teku", "nimbus", "lodestar", "grandine", "caplin",
};

const char *bm_client_name(bm_client_t c)
{
    return (unsigned)c < BM_CLIENT_COUNT ? client_names[c] : "unknown";
}

bm_client_t bm_client_parse(const char *name, size_t len)
{
    for (int i = 1; i < BM_CLIENT_COUNT; i++)
        if (strlen(client_names[i]) == len && strncasecmp(name, client_names[i], len) == 0)
            return (bm_client_t)i;
    return BM_CLIENT_UNKNOWN;
}

bm_client_t bm_client_detect(const char *version)
{
    if (!version)
        return BM_CLIENT_UNKNOWN;
    /* The brand is the product token before the first '/', e.g. "teku/v25.1.0/linux-x86_64".
     * Erigon's embedded consensus layer reports itself as "Caplin" or "erigon/caplin". */
    size_t len = strcspn(version, "/ ");
    bm_client_t c = bm_client_parse(version, len);
    if (c != BM_CLIENT_UNKNOWN)
        return c;
    if (strcasestr(version, "caplin"))
        return BM_CLIENT_CAPLIN;
    for (int i = 1; i < BM_CLIENT_COUNT; i++)
        if (strcasestr(version, client_names[i]))
            return (bm_client_t)i;
    return BM_CLIENT_UNKNOWN;
}
