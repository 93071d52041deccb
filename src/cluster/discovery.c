/* SPDX-License-Identifier: MIT */
/*
 * discovery: rounds of five GETs per node, the verdict over all nodes after each round,
 * and the static endpoints. A round is complete when all five transfers finished; the
 * node's snapshot (the bodies served verbatim) is replaced only by a complete round with
 * genesis, spec and version all answered 200, so a node that fails half-way keeps its
 * previous snapshot.
 */
#include "cluster/discovery.h"

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/defaults.h"
#include "base/err.h"
#include "base/json.h"
#include "base/log.h"
#include "base/url.h"

#define MAX_CHAIN_LISTENERS 8

enum { EP_VERSION, EP_GENESIS, EP_SPEC, EP_FORK_SCHEDULE, EP_DEPOSIT, EP_COUNT };

static const char *const ep_paths[EP_COUNT] = {
    "/eth/v1/node/version",         "/eth/v1/beacon/genesis",          "/eth/v1/config/spec",
    "/eth/v1/config/fork_schedule", "/eth/v1/config/deposit_contract",
};

typedef struct node_disc {
    bm_discovery_t *d;
    bm_node_t *node;
    bm_xfer_t *x[EP_COUNT];
    int pending;          /* transfers of the running round */
    int status[EP_COUNT]; /* this round's answers */
    bm_buf_t *got[EP_COUNT];
    bm_buf_t *body[EP_COUNT]; /* the last complete snapshot */
    bool have;                /* a snapshot exists */
    bm_chain_info_t chain;    /* parsed from the snapshot */
    bm_timer_t *retry;        /* next full round after a failure, or next probe */
    bool retry_open;
    bool next_is_probe; /* the timer runs a version probe, not a full round */
    bm_xfer_t *probe;   /* running version probe */
} node_disc_t;

struct bm_discovery {
    bm_clock_t *clock;
    bm_upstream_t *up;
    bm_pool_t *pool;
    bm_discovery_opts_t opts;
    node_disc_t *nodes;
    size_t n;
    int ref; /* index of the reference node, -1 before the first */
    bm_chain_info_t chain;
    bm_timer_t *epoch_timer;
    bool epoch_timer_open;
    bool stopped;
    bool free_pending;
    int open_handles;
    struct {
        bm_discovery_chain_fn fn;
        void *ud;
    } chain_listeners[MAX_CHAIN_LISTENERS];
    size_t n_chain_listeners;
    bm_hdrs_t req_headers;
};

void bm_discovery_opts_default(bm_discovery_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->retry_interval_ms = BM_DEFAULT_DISCOVERY_RETRY_INTERVAL_MS;
    o->probe_interval_ms = 0;
    o->connect_timeout_ms = BM_DEFAULT_TIMEOUTS_CONNECT_MS;
    o->timeout_ms = 5000;
}

static void start_round(node_disc_t *nd);
static void on_retry(bm_timer_t *t, void *ud);
static void on_epoch(bm_timer_t *t, void *ud);
static void on_pool_state(bm_node_t *node, bm_node_state_t old, void *ud);

bm_discovery_t *bm_discovery_new(bm_clock_t *clock, bm_upstream_t *up, bm_pool_t *pool,
                                 const bm_discovery_opts_t *opts)
{
    bm_discovery_t *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->clock = clock;
    d->up = up;
    d->pool = pool;
    if (opts)
        d->opts = *opts;
    else
        bm_discovery_opts_default(&d->opts);
    d->ref = -1;
    d->n = bm_pool_count(pool);
    d->nodes = calloc(d->n ? d->n : 1, sizeof *d->nodes);
    bm_hdrs_init(&d->req_headers);
    if (!d->nodes || bm_hdrs_add_z(&d->req_headers, "Accept", "application/json") != 0 ||
        bm_pool_on_state(pool, on_pool_state, d) != 0) {
        bm_hdrs_dispose(&d->req_headers);
        free(d->nodes);
        free(d);
        return NULL;
    }
    for (size_t i = 0; i < d->n; i++) {
        d->nodes[i].d = d;
        d->nodes[i].node = bm_pool_node(pool, i);
        d->nodes[i].retry = bm_timer_new(clock, on_retry, &d->nodes[i]);
        if (!d->nodes[i].retry) {
            bm_discovery_free(d);
            return NULL;
        }
        d->nodes[i].retry_open = true;
        d->open_handles++;
    }
    d->epoch_timer = bm_timer_new(clock, on_epoch, d);
    if (!d->epoch_timer) {
        bm_discovery_free(d);
        return NULL;
    }
    d->epoch_timer_open = true;
    d->open_handles++;
    return d;
}

int bm_discovery_on_chain(bm_discovery_t *d, bm_discovery_chain_fn fn, void *ud)
{
    if (d->n_chain_listeners == MAX_CHAIN_LISTENERS)
        return BM_ENOMEM;
    d->chain_listeners[d->n_chain_listeners].fn = fn;
    d->chain_listeners[d->n_chain_listeners].ud = ud;
    d->n_chain_listeners++;
    return 0;
}

void bm_discovery_off_chain(bm_discovery_t *d, void *ud)
{
    size_t out = 0;
    for (size_t i = 0; i < d->n_chain_listeners; i++)
        if (d->chain_listeners[i].ud != ud)
            d->chain_listeners[out++] = d->chain_listeners[i];
    d->n_chain_listeners = out;
}

const bm_chain_info_t *bm_discovery_chain(const bm_discovery_t *d)
{
    return &d->chain;
}

const bm_node_t *bm_discovery_reference(const bm_discovery_t *d)
{
    return d->ref >= 0 ? d->nodes[d->ref].node : NULL;
}

/* ---- the verdict -------------------------------------------------------------- */

static bool node_candidate(const node_disc_t *nd)
{
    return nd->have;
}

/* Does this node's word decide the cluster's network? Not a shadow's: it is judged against
 * the network the serving nodes agree on, never the reference. */
static bool node_decides(const node_disc_t *nd)
{
    return nd->have && !nd->node->shadow;
}

/* The cluster's genesis root, or false when it cannot be decided (a tie, or no serving
 * node answered yet). */
static bool decide_root(bm_discovery_t *d, uint8_t root[32])
{
    if (d->opts.has_genesis_root) {
        memcpy(root, d->opts.genesis_root, 32);
        return true;
    }
    size_t best = 0, best_count = 0;
    bool tie = false, found = false;
    for (size_t i = 0; i < d->n; i++) {
        if (!node_decides(&d->nodes[i]))
            continue;
        size_t count = 0;
        for (size_t j = 0; j < d->n; j++)
            if (node_decides(&d->nodes[j]) &&
                memcmp(d->nodes[i].chain.genesis_root, d->nodes[j].chain.genesis_root, 32) == 0)
                count++;
        bool same_as_best = found && memcmp(d->nodes[i].chain.genesis_root,
                                            d->nodes[best].chain.genesis_root, 32) == 0;
        if (!found || count > best_count) {
            best = i;
            best_count = count;
            tie = false;
            found = true;
        } else if (count == best_count && !same_as_best) {
            tie = true;
            /* the root already in use wins a tie: a newcomer cannot unseat it */
            if (d->chain.known &&
                memcmp(d->nodes[i].chain.genesis_root, d->chain.genesis_root, 32) == 0)
                best = i;
        }
    }
    if (!found)
        return false;
    if (tie && !(d->chain.known &&
                 memcmp(d->nodes[best].chain.genesis_root, d->chain.genesis_root, 32) == 0))
        return false;
    memcpy(root, d->nodes[best].chain.genesis_root, 32);
    return true;
}

static bool spec_compatible(const node_disc_t *a, const node_disc_t *b, char *why, size_t cap)
{
    const bm_buf_t *sa = a->body[EP_SPEC], *sb = b->body[EP_SPEC];
    if (a->chain.clock.genesis_ms != b->chain.clock.genesis_ms) {
        snprintf(why, cap, "genesis_time differs");
        return false;
    }
    return bm_chain_spec_compatible(sa->data, sa->len, sb->data, sb->len, why, cap);
}

static void set_chain(bm_discovery_t *d, const bm_chain_info_t *c);

static void recompute(bm_discovery_t *d)
{
    uint8_t root[32];
    char want[67], got[67], why[160];
    if (!decide_root(d, root)) {
        for (size_t i = 0; i < d->n; i++)
            if (node_decides(&d->nodes[i]))
                bm_pool_set_network(d->pool, d->nodes[i].node, BM_NET_WRONG,
                                    "genesis_validators_root split between nodes with no "
                                    "majority; set genesisValidatorsRoot to choose");
        return;
    }
    bm_root_to_hex(root, want);
    /* Reference: the matching node whose spec agrees with the most others (a majority on
     * the critical keys); among equals the current reference, then reachable nodes, then
     * configuration order, so the reference does not wander between equal nodes. */
    int ref = -1;
    long best_score = -1;
    for (size_t i = 0; i < d->n; i++) {
        node_disc_t *a = &d->nodes[i];
        if (!node_decides(a) || memcmp(a->chain.genesis_root, root, 32) != 0)
            continue;
        long compat = 0;
        for (size_t j = 0; j < d->n; j++) {
            node_disc_t *b = &d->nodes[j];
            if (j != i && node_decides(b) && memcmp(b->chain.genesis_root, root, 32) == 0 &&
                spec_compatible(a, b, why, sizeof why))
                compat++;
        }
        long score = compat * 4 + ((int)i == d->ref ? 2 : 0) + (a->node->reachable ? 1 : 0);
        if (score > best_score) {
            ref = (int)i;
            best_score = score;
        }
    }
    if (ref >= 0 && ref != d->ref) {
        bm_log(BM_LOG_INFO, "static endpoints now served from upstream %s", d->nodes[ref].node->id);
        d->ref = ref;
    }
    /* The chain first: a node's network verdict makes health judge it at once, and judged
     * before the chain is known, a node of a running chain whose head is not known yet would
     * be "ready" for a moment, until the chain's arrival makes it "no-head". */
    if (ref >= 0)
        set_chain(d, &d->nodes[ref].chain);
    for (size_t i = 0; i < d->n; i++) {
        node_disc_t *nd = &d->nodes[i];
        if (!node_candidate(nd))
            continue;
        if (memcmp(nd->chain.genesis_root, root, 32) != 0) {
            bm_root_to_hex(nd->chain.genesis_root, got);
            bm_pool_set_network(d->pool, nd->node, BM_NET_WRONG,
                                "genesis_validators_root %s differs from the cluster's %s%s", got,
                                want, d->opts.has_genesis_root ? " (configured)" : "");
        } else if (ref >= 0 && (int)i != ref &&
                   !spec_compatible(nd, &d->nodes[ref], why, sizeof why)) {
            bm_pool_set_network(d->pool, nd->node, BM_NET_WRONG, "%s (reference: %s)", why,
                                d->nodes[ref].node->id);
        } else {
            bm_pool_set_network(d->pool, nd->node, BM_NET_OK, "same network");
        }
    }
}

/* ---- the periodic refresh --------------------------------------------------------- */

static void arm_epoch_timer(bm_discovery_t *d);

static void on_epoch(bm_timer_t *t, void *ud)
{
    bm_discovery_t *d = ud;
    (void)t;
    for (size_t i = 0; i < d->n; i++)
        start_round(&d->nodes[i]);
    arm_epoch_timer(d);
}

static void arm_epoch_timer(bm_discovery_t *d)
{
    if (d->stopped || !d->chain.known)
        return;
    const bm_slot_clock_t *c = &d->chain.clock;
    uint64_t now = bm_clock_wall_now(d->clock);
    uint64_t epoch = bm_epoch_of_slot(c, bm_slot_at(c, now));
    uint64_t next = bm_slot_start_ms(c, bm_epoch_start_slot(c, epoch + 1));
    if (now < c->genesis_ms)
        next = c->genesis_ms;
    /* a second into the epoch: upgraded nodes have switched their schedule by then */
    uint64_t delay = (next > now ? next - now : 0) + 1000;
    bm_timer_start(d->epoch_timer, delay);
}

static void set_chain(bm_discovery_t *d, const bm_chain_info_t *c)
{
    if (d->chain.known && memcmp(&d->chain, c, sizeof *c) == 0)
        return;
    bool first = !d->chain.known;
    d->chain = *c;
    if (first)
        bm_log(BM_LOG_INFO, "chain: genesis %llu, %u ms slots, %u slots per epoch",
               (unsigned long long)(c->clock.genesis_ms / 1000), c->clock.slot_ms,
               c->clock.slots_per_epoch);
    else
        bm_log(BM_LOG_INFO, "chain configuration changed (fork schedule or constants)");
    arm_epoch_timer(d);
    for (size_t i = 0; i < d->n_chain_listeners; i++)
        d->chain_listeners[i].fn(&d->chain, d->chain_listeners[i].ud);
}

/* ---- rounds ----------------------------------------------------------------------- */

static void start_probe(node_disc_t *nd);

static void on_retry(bm_timer_t *t, void *ud)
{
    node_disc_t *nd = ud;
    (void)t;
    if (nd->next_is_probe)
        start_probe(nd);
    else
        start_round(nd);
}

/* A full round after retry_interval; replaces a pending probe. */
static void arm_retry(node_disc_t *nd)
{
    if (nd->d->stopped)
        return;
    if (bm_timer_active(nd->retry) && !nd->next_is_probe)
        return;
    nd->next_is_probe = false;
    bm_timer_start(nd->retry, nd->d->opts.retry_interval_ms);
}

/* A version probe after a slot (or the probe interval before the chain is known): it keeps
 * reachability current between requests and notices an upgraded node at once. */
static void arm_probe(node_disc_t *nd)
{
    bm_discovery_t *d = nd->d;
    if (d->stopped || bm_timer_active(nd->retry))
        return;
    uint32_t interval = d->chain.known ? d->chain.clock.slot_ms : d->opts.retry_interval_ms;
    if (d->opts.probe_interval_ms && d->opts.probe_interval_ms < interval)
        interval = d->opts.probe_interval_ms;
    nd->next_is_probe = true;
    bm_timer_start(nd->retry, interval);
}

static char *version_of(const bm_buf_t *b)
{
    json_object *o = json_tokener_parse(b->data);
    json_object *data, *v;
    char *out = NULL;
    if (o && json_object_object_get_ex(o, "data", &data) &&
        json_object_object_get_ex(data, "version", &v) && json_object_is_type(v, json_type_string))
        out = strdup(json_object_get_string(v));
    json_object_put(o);
    return out;
}

static void round_done(node_disc_t *nd)
{
    bm_discovery_t *d = nd->d;
    bm_node_t *node = nd->node;
    bool ok = nd->status[EP_VERSION] == 200 && nd->status[EP_GENESIS] == 200 &&
              nd->status[EP_SPEC] == 200;
    bm_chain_info_t chain;
    char err[128] = "";
    if (ok &&
        bm_chain_parse(nd->got[EP_GENESIS]->data, nd->got[EP_GENESIS]->len, nd->got[EP_SPEC]->data,
                       nd->got[EP_SPEC]->len, &chain, err, sizeof err) != 0) {
        bm_log(BM_LOG_WARN, "upstream %s: unusable discovery answer: %s", node->id, err);
        ok = false;
    }
    char *version = ok ? version_of(nd->got[EP_VERSION]) : NULL;
    if (ok && !version) {
        bm_log(BM_LOG_WARN, "upstream %s: /eth/v1/node/version has no data.version", node->id);
        ok = false;
    }
    if (ok) {
        if (node->version && strcmp(node->version, version) != 0)
            bm_log(BM_LOG_INFO, "upstream %s changed version: %s -> %s", node->id, node->version,
                   version);
        else if (!node->version)
            bm_log(BM_LOG_INFO, "upstream %s is %s", node->id, version);
        free(node->version);
        node->version = version;
        node->client = bm_client_detect(version);
        for (int e = 0; e < EP_COUNT; e++) {
            if (nd->status[e] == 200 || !nd->body[e]) {
                bm_buf_unref(nd->body[e]);
                nd->body[e] = nd->status[e] == 200 ? bm_buf_ref(nd->got[e]) : NULL;
            }
        }
        nd->chain = chain;
        nd->have = true;
        arm_probe(nd);
    } else {
        arm_retry(nd);
    }
    for (int e = 0; e < EP_COUNT; e++) {
        bm_buf_unref(nd->got[e]);
        nd->got[e] = NULL;
    }
    recompute(d);
}

static void on_xfer_done(bm_xfer_t *x, const bm_xfer_result_t *res, void *ud)
{
    node_disc_t *nd = ud;
    int e = 0;
    while (e < EP_COUNT && nd->x[e] != x)
        e++;
    bm_assert(e < EP_COUNT);
    nd->x[e] = NULL;
    nd->status[e] = res->err ? 0 : res->status;
    if (!res->err && res->status == 200 && res->body)
        nd->got[e] = bm_buf_ref(res->body);
    bm_outcome_t outcome = res->err             ? BM_OUTCOME_NET_ERROR
                           : res->status >= 500 ? BM_OUTCOME_HTTP_5XX
                                                : BM_OUTCOME_OK;
    bm_pool_record(nd->d->pool, nd->node, outcome, res->err == BM_ECONNREFUSED, res->elapsed_us,
                   res->err ? (*res->detail ? res->detail : bm_strerror(res->err)) : NULL);
    if (--nd->pending == 0)
        round_done(nd);
}

static const bm_xfer_cbs_t disc_cbs = {NULL, NULL, on_xfer_done};

static void on_probe_done(bm_xfer_t *x, const bm_xfer_result_t *res, void *ud)
{
    node_disc_t *nd = ud;
    (void)x;
    nd->probe = NULL;
    bm_outcome_t outcome = res->err             ? BM_OUTCOME_NET_ERROR
                           : res->status >= 500 ? BM_OUTCOME_HTTP_5XX
                                                : BM_OUTCOME_OK;
    bm_pool_record(nd->d->pool, nd->node, outcome, res->err == BM_ECONNREFUSED, res->elapsed_us,
                   res->err ? (*res->detail ? res->detail : bm_strerror(res->err)) : NULL);
    char *version = !res->err && res->status == 200 && res->body ? version_of(res->body) : NULL;
    bool changed = version && nd->node->version && strcmp(version, nd->node->version) != 0;
    free(version);
    if (changed || (outcome == BM_OUTCOME_OK && !nd->have))
        start_round(nd); /* upgraded (or never discovered): fetch everything again */
    else if (outcome == BM_OUTCOME_OK)
        arm_probe(nd);
    else
        arm_retry(nd);
}

static const bm_xfer_cbs_t probe_cbs = {NULL, NULL, on_probe_done};

/* A GET of endpoint `e` on the node, answers of at most `max_bytes`; NULL when not started. */
static bm_xfer_t *get(node_disc_t *nd, int e, size_t max_bytes, const bm_xfer_cbs_t *cbs)
{
    bm_discovery_t *d = nd->d;
    bm_str_t url = BM_STR_INIT;
    bm_xfer_t *x = NULL;
    if (bm_url_join(&url, nd->node->url, ep_paths[e]) == 0) {
        bm_xfer_req_t req = {
            .method = "GET",
            .url = bm_str_data(&url),
            .headers = &d->req_headers,
            .extra = &nd->node->extra,
            .connect_timeout_ms = d->opts.connect_timeout_ms,
            .timeout_ms = d->opts.timeout_ms,
            .max_response_bytes = max_bytes,
        };
        x = bm_upstream_start(d->up, &req, cbs, nd);
    }
    bm_str_dispose(&url);
    return x;
}

static void start_probe(node_disc_t *nd)
{
    bm_discovery_t *d = nd->d;
    if (d->stopped || nd->pending > 0 || nd->probe)
        return;
    nd->probe = get(nd, EP_VERSION, 64 << 10, &probe_cbs);
    if (!nd->probe)
        arm_retry(nd);
}

static void start_round(node_disc_t *nd)
{
    bm_discovery_t *d = nd->d;
    if (d->stopped || nd->pending > 0)
        return;
    bm_timer_stop(nd->retry);
    if (nd->probe) {
        bm_upstream_cancel(nd->probe);
        nd->probe = NULL;
    }
    memset(nd->status, 0, sizeof nd->status);
    for (int e = 0; e < EP_COUNT; e++) {
        nd->pending++; /* before the start: on_done may run before it returns */
        nd->x[e] = get(nd, e, 4 << 20, &disc_cbs);
        if (!nd->x[e])
            nd->pending--;
    }
    if (nd->pending == 0)
        arm_retry(nd);
}

static void on_pool_state(bm_node_t *node, bm_node_state_t old, void *ud)
{
    bm_discovery_t *d = ud;
    node_disc_t *nd = &d->nodes[node->index];
    if (node->state == BM_NODE_UNREACHABLE)
        arm_retry(nd); /* keep knocking until it answers */
    else if (old == BM_NODE_UNREACHABLE)
        start_round(nd); /* it came back: it may have been upgraded meanwhile */
}

int bm_discovery_start(bm_discovery_t *d)
{
    for (size_t i = 0; i < d->n; i++)
        start_round(&d->nodes[i]);
    return 0;
}

void bm_discovery_refresh(bm_discovery_t *d, bm_node_t *n)
{
    if ((size_t)n->index < d->n)
        start_round(&d->nodes[n->index]);
}

/* ---- teardown --------------------------------------------------------------------- */

static void really_free(bm_discovery_t *d)
{
    for (size_t i = 0; i < d->n; i++)
        for (int e = 0; e < EP_COUNT; e++) {
            bm_buf_unref(d->nodes[i].body[e]);
            bm_buf_unref(d->nodes[i].got[e]);
        }
    bm_hdrs_dispose(&d->req_headers);
    free(d->nodes);
    free(d);
}

static void handle_closed(bm_discovery_t *d)
{
    if (--d->open_handles == 0 && d->free_pending)
        really_free(d);
}

static void on_timer_closed(void *ud)
{
    handle_closed(ud);
}

void bm_discovery_stop(bm_discovery_t *d)
{
    if (d->stopped)
        return;
    d->stopped = true;
    for (size_t i = 0; i < d->n; i++) {
        node_disc_t *nd = &d->nodes[i];
        for (int e = 0; e < EP_COUNT; e++)
            if (nd->x[e]) {
                bm_upstream_cancel(nd->x[e]);
                nd->x[e] = NULL;
            }
        nd->pending = 0;
        if (nd->probe) {
            bm_upstream_cancel(nd->probe);
            nd->probe = NULL;
        }
        if (nd->retry_open) {
            nd->retry_open = false;
            bm_timer_close(nd->retry, on_timer_closed, d);
        }
    }
    if (d->epoch_timer_open) {
        d->epoch_timer_open = false;
        bm_timer_close(d->epoch_timer, on_timer_closed, d);
    }
}

void bm_discovery_free(bm_discovery_t *d)
{
    if (!d)
        return;
    bm_discovery_stop(d);
    if (d->open_handles == 0)
        really_free(d);
    else
        d->free_pending = true;
}

/* ---- serving ---------------------------------------------------------------------- */

/* The node whose snapshot answers: the reference while it is usable and reachable, else
 * the best-ranked node on the cluster's network that has the body. */
static const node_disc_t *serving_node(const bm_discovery_t *d, int e)
{
    if (d->ref >= 0) {
        const node_disc_t *r = &d->nodes[d->ref];
        if (r->body[e] && r->node->network == BM_NET_OK && r->node->reachable)
            return r;
    }
    const node_disc_t *best = NULL;
    for (size_t i = 0; i < d->n; i++) {
        const node_disc_t *nd = &d->nodes[i];
        if (!nd->body[e] || nd->node->network != BM_NET_OK || nd->node->shadow)
            continue;
        if (!best || bm_node_rank(nd->node) < bm_node_rank(best->node))
            best = nd;
    }
    return best;
}

void bm_discovery_route(bm_req_t *req, const bm_route_params_t *params, void *ud)
{
    bm_discovery_t *d = ud;
    (void)params;
    size_t len;
    const char *path = bm_req_path(req, &len);
    int e = -1;
    for (int i = EP_GENESIS; i < EP_COUNT; i++)
        if (strlen(ep_paths[i]) == len && memcmp(path, ep_paths[i], len) == 0)
            e = i;
    if (e < 0) {
        bm_resp_error(req, 404, "not a static endpoint");
        return;
    }
    const node_disc_t *nd = serving_node(d, e);
    if (!nd) {
        bm_resp_error(req, 503, "no beacon node has answered %s yet", ep_paths[e]);
        return;
    }
    bm_resp_send(req, 200, "application/json", nd->body[e], NULL);
}
