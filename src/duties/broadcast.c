/* SPDX-License-Identifier: MIT */
/*
 * broadcast: writes to every node through the race engine (see broadcast.h for the rules
 * and docs/broadcast.md for why).
 *
 * One client request is one context (wctx_t). A write has one phase (one detached write
 * race over every candidate) or, for a blinded block whose producer is known, two: the
 * producer alone, then everyone else when the producer answered or its head start ran out.
 * The context lives while the client request is open or a race of it has not completed:
 * it holds a copy of the request (target, headers, body), because the second phase and
 * the completion (SSZ memory, replay feed) need it after the client may have gone.
 *
 * The client gets the first 2xx of any phase. Without one, it gets the most specific error
 * once every phase has answered: a 4xx beats a 3xx beats a 5xx beats no answer at all,
 * with the 415 rules of broadcast.h on top. Reads (DVT selections, the stateful envelope
 * read) are sequential races that end with their client.
 */
#include "duties/broadcast.h"

#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/clock.h"
#include "base/defaults.h"
#include "base/err.h"
#include "base/json.h"
#include "base/list.h"
#include "base/log.h"
#include "base/ssz.h"
#include "duties/indexed.h"

#define MAX_WRITE_ANSWER (1u << 20) /* write answers are empty or an error object */

#define NO_REPLAY (-1)

static const bm_broadcast_route_t ROUTES[] = {
    /* gossip objects */
    {"POST", "/eth/v2/beacon/blocks", "publishBlockV2", BM_BCAST_PUBLISH, true, false, false,
     NO_REPLAY},
    {"POST", "/eth/v2/beacon/blinded_blocks", "publishBlindedBlockV2", BM_BCAST_PUBLISH, true, true,
     false, NO_REPLAY},
    {"POST", "/eth/v1/beacon/execution_payload_envelopes", "publishExecutionPayloadEnvelope",
     BM_BCAST_PUBLISH, true, false, false, NO_REPLAY},
    {"POST", "/eth/v1/beacon/execution_payload_bids", "publishExecutionPayloadBid",
     BM_BCAST_PUBLISH, true, false, false, NO_REPLAY},
    /* pools and duty messages */
    {"POST", "/eth/v2/beacon/pool/attestations", "submitPoolAttestationsV2", BM_BCAST_POOL, true,
     false, false, NO_REPLAY},
    {"POST", "/eth/v2/validator/aggregate_and_proofs", "publishAggregateAndProofsV2", BM_BCAST_POOL,
     true, false, false, NO_REPLAY},
    {"POST", "/eth/v1/beacon/pool/sync_committees", "submitPoolSyncCommitteeSignatures",
     BM_BCAST_POOL, false, false, false, NO_REPLAY},
    {"POST", "/eth/v1/validator/contribution_and_proofs", "publishContributionAndProofs",
     BM_BCAST_POOL, false, false, false, NO_REPLAY},
    {"POST", "/eth/v1/beacon/pool/payload_attestations", "submitPayloadAttestationMessages",
     BM_BCAST_POOL, true, false, false, NO_REPLAY},
    {"POST", "/eth/v1/beacon/pool/voluntary_exits", "submitPoolVoluntaryExit", BM_BCAST_POOL, false,
     false, false, NO_REPLAY},
    {"POST", "/eth/v1/beacon/pool/proposer_slashings", "submitPoolProposerSlashings", BM_BCAST_POOL,
     false, false, false, NO_REPLAY},
    {"POST", "/eth/v2/beacon/pool/attester_slashings", "submitPoolAttesterSlashingsV2",
     BM_BCAST_POOL, false, false, false, NO_REPLAY},
    {"POST", "/eth/v1/beacon/pool/bls_to_execution_changes", "submitPoolBLSToExecutionChange",
     BM_BCAST_POOL, false, false, false, NO_REPLAY},
    /* node-local state, replayed */
    {"POST", "/eth/v1/validator/beacon_committee_subscriptions", "prepareBeaconCommitteeSubnet",
     BM_BCAST_STATE, false, false, false, BM_REPLAY_COMMITTEE_SUBS},
    {"POST", "/eth/v1/validator/sync_committee_subscriptions", "prepareSyncCommitteeSubnets",
     BM_BCAST_STATE, false, false, false, BM_REPLAY_SYNC_SUBS},
    {"POST", "/eth/v1/validator/prepare_beacon_proposer", "prepareBeaconProposer", BM_BCAST_STATE,
     false, false, false, BM_REPLAY_PREPARATION},
    {"POST", "/eth/v1/validator/register_validator", "registerValidator", BM_BCAST_STATE, true,
     false, false, BM_REPLAY_REGISTRATION},
    {"POST", "/eth/v1/validator/proposer_preferences", "submitProposerPreferences", BM_BCAST_STATE,
     true, false, false, BM_REPLAY_PREFERENCES},
    /* reads in disguise */
    {"POST", "/eth/v1/validator/beacon_committee_selections", "submitBeaconCommitteeSelections",
     BM_BCAST_SELECTIONS, false, false, false, NO_REPLAY},
    {"POST", "/eth/v1/validator/sync_committee_selections", "submitSyncCommitteeSelections",
     BM_BCAST_SELECTIONS, false, false, false, NO_REPLAY},
    {"GET", "/eth/v1/validator/execution_payload_envelopes/{slot}/{beacon_block_root}",
     "getExecutionPayloadEnvelope", BM_BCAST_PRODUCER_READ, false, true, false, NO_REPLAY},
    /* removed in v4.0.0, still sent by older validator clients and served by older nodes */
    {"POST", "/eth/v1/beacon/blocks", "publishBlock", BM_BCAST_PUBLISH, true, false, true,
     NO_REPLAY},
    {"POST", "/eth/v1/beacon/blinded_blocks", "publishBlindedBlock", BM_BCAST_PUBLISH, true, true,
     true, NO_REPLAY},
    {"POST", "/eth/v1/beacon/pool/attestations", "submitPoolAttestations", BM_BCAST_POOL, false,
     false, true, NO_REPLAY},
    {"POST", "/eth/v1/beacon/pool/attester_slashings", "submitPoolAttesterSlashings", BM_BCAST_POOL,
     false, false, true, NO_REPLAY},
    {"POST", "/eth/v1/validator/aggregate_and_proofs", "publishAggregateAndProofs", BM_BCAST_POOL,
     false, false, true, NO_REPLAY},
};

#define N_ROUTES (sizeof ROUTES / sizeof ROUTES[0])

const bm_broadcast_route_t *bm_broadcast_routes(size_t *n)
{
    if (n)
        *n = N_ROUTES;
    return ROUTES;
}

/* ---- state -------------------------------------------------------------------------------- */

typedef struct sszmem {
    uint8_t state;     /* bm_ssz_support_t */
    uint64_t since_ms; /* monotonic */
} sszmem_t;

/* The version a node reported (/eth/v1/node/version) when its refusals were recorded: a
 * node that reports another one since was upgraded (or replaced), and its refusals are
 * stale. "" when it was not known. */
typedef struct refusal_ver {
    char v[128];
} refusal_ver_t;

typedef struct route_ud {
    bm_broadcast_t *b;
    size_t route;
} route_ud_t;

/* An answer kept past its callback. */
typedef struct kept {
    bool set;
    int status;
    int rank;
    bm_hdrs_t hdrs;
    bm_buf_t *body;
} kept_t;

typedef struct wctx wctx_t;

struct bm_broadcast {
    bm_clock_t *clock;
    bm_race_engine_t *race;
    bm_pool_t *pool;
    bm_replay_t *replay;
    bm_broadcast_opts_t opts;
    bm_broadcast_producer_fn producer;
    void *producer_ud;
    size_t n_nodes;
    sszmem_t *mem;      /* n_nodes * N_ROUTES */
    bool *restored;     /* n_nodes: its memory came from a state file and it was not seen yet */
    refusal_ver_t *ver; /* n_nodes: the version its refusals were recorded under */
    bm_broadcast_ssz_fn on_refusal; /* shared state: a node newly refusing SSZ (NULL: none) */
    void *on_refusal_ud;
    route_ud_t rud[N_ROUTES];
    bm_link_t ctxs; /* every live context (wctx_t) */
    size_t n_ctxs;
    bm_timer_t *timer; /* producer head starts */
    bool stopped;
    bool timer_closed;
    bm_broadcast_stats_t stats;
    bm_log_limit_t lim;
};

struct wctx {
    bm_broadcast_t *b;
    size_t route;
    const bm_broadcast_route_t *rt;
    bm_req_t *req; /* NULL once the client was answered or left */
    unsigned refs; /* the request, and each race whose completion is pending */
    bool ssz;      /* the body is SSZ */
    char *target;
    bm_hdrs_t hdrs;
    bm_buf_t *body;
    /* phases: 0 is the only one, or the producer's; 1 is everyone else's */
    bm_race_t *race[2];
    bm_race_waiter_t *w[2];
    bool answered[2];
    bool two_phase, phase2_started;
    bm_node_t *rest[BM_MAX_NODES]; /* phase 1's candidates */
    size_t n_rest;
    uint64_t headstart_at; /* monotonic ms at which phase 1 starts anyway; 0: none */
    bool skipped_refusers; /* gossip object: SSZ not sent to nodes known to refuse it */
    int client_status;     /* what the client was answered (0: nothing yet) */
    bool fed;              /* the write was given to replay */
    kept_t err;            /* the most specific non-2xx answer so far */
    kept_t r415;           /* a node's 415 */
    bm_indexed_t *merge;   /* pool and publish writes: the nodes' indexed errors, item by
                              item (NULL: not merged) */
    /* a one-phase write sent to nodes judged unreachable as well: the others, whose failure
     * is all the client's error waits for (n_waited 0: it waits for every node) */
    bool waits_for[BM_MAX_NODES];
    size_t n_waited;
    bool seen_2xx;  /* some node answered 2xx (the decision may wait out an SSZ grace) */
    bm_link_t link; /* on the broadcast's ctxs */
};

void bm_broadcast_opts_default(bm_broadcast_opts_t *o)
{
    o->write_timeout_ms = BM_DEFAULT_DUTIES_WRITE_TIMEOUT_MS;
    o->connect_timeout_ms = BM_DEFAULT_TIMEOUTS_CONNECT_MS;
    o->read_timeout_ms = BM_DEFAULT_TIMEOUTS_READ_MS;
    o->producer_headstart_ms = 1000;
    o->ssz_probe_grace_ms = 100;
    o->ssz_memory_ms = 3600000;
}

/* ---- small helpers ------------------------------------------------------------------------ */

/* Whether a write's client waits on this node (for its answer, its SSZ verdict, its head
 * start as a producer): not on one judged unreachable, which is sent the write all the same
 * (the verdict may be a moment old). */
static bool client_waits_for(const bm_node_t *n)
{
    return n->state != BM_NODE_UNREACHABLE;
}

/* Ranks a non-2xx answer: lower is more specific. No HTTP answer ranks last. */
static int rank_of(const bm_race_answer_t *a)
{
    if (a->err || !a->node)
        return 4;
    if (a->status >= 400 && a->status <= 499)
        return 1;
    if (a->status >= 500)
        return 3;
    return 2;
}

static void kept_set(kept_t *k, const bm_race_answer_t *a, int rank)
{
    bm_hdrs_clear(&k->hdrs);
    if (a->headers)
        bm_hdrs_copy(&k->hdrs, a->headers);
    bm_buf_t *old = k->body;
    k->body = bm_buf_ref(a->body);
    bm_buf_unref(old);
    k->status = a->status;
    k->rank = rank;
    k->set = true;
}

static void kept_dispose(kept_t *k)
{
    bm_hdrs_dispose(&k->hdrs);
    bm_buf_unref(k->body);
    k->body = NULL;
    k->set = false;
}

/* ---- SSZ memory ----------------------------------------------------------------------------- */

static sszmem_t *mem_at(const bm_broadcast_t *b, size_t node, size_t route)
{
    if (node >= b->n_nodes || route >= N_ROUTES)
        return NULL;
    return &b->mem[node * N_ROUTES + route];
}

/* The node reports a version other than the one its refusals were recorded under: it was
 * upgraded (a restart too quick to be seen as unreachable, or one while beaconmux was
 * down), so what it refused before says nothing about it now. */
static bool upgraded_since_refusal(const bm_broadcast_t *b, size_t node)
{
    const bm_node_t *n = bm_pool_node(b->pool, node);
    const char *then = b->ver[node].v;
    return n && n->version && *then && strncmp(n->version, then, sizeof b->ver[node].v - 1) != 0;
}

bm_ssz_support_t bm_broadcast_ssz_support(const bm_broadcast_t *b, size_t node, size_t route)
{
    const sszmem_t *m = b ? mem_at(b, node, route) : NULL;
    if (!m)
        return BM_SSZ_UNKNOWN;
    if (m->state == BM_SSZ_REFUSED &&
        (bm_clock_mono_now(b->clock) - m->since_ms > b->opts.ssz_memory_ms ||
         upgraded_since_refusal(b, node)))
        return BM_SSZ_UNKNOWN;
    return (bm_ssz_support_t)m->state;
}

/* A refusal is about to be recorded for `node` under `version` (NULL: unknown): the
 * refusals recorded under another version go first, as the node was upgraded since. */
static void note_refusal_version(bm_broadcast_t *b, size_t node, const char *version)
{
    if (upgraded_since_refusal(b, node)) {
        bm_log(BM_LOG_INFO, "broadcast: %s changed version since it refused SSZ (%s): asked again",
               bm_pool_node(b->pool, node)->id, b->ver[node].v);
        bm_broadcast_forget_node(b, node);
    }
    snprintf(b->ver[node].v, sizeof b->ver[node].v, "%s", version ? version : "");
}

static void mem_learn(bm_broadcast_t *b, const bm_node_t *n, size_t route, int status)
{
    sszmem_t *m = n->index >= 0 ? mem_at(b, (size_t)n->index, route) : NULL;
    if (!m)
        return;
    uint8_t s = status == 415 ? BM_SSZ_REFUSED : BM_SSZ_ACCEPTED;
    if (s == BM_SSZ_REFUSED)
        note_refusal_version(b, (size_t)n->index, n->version);
    if (m->state != s && s == BM_SSZ_REFUSED)
        bm_log(BM_LOG_INFO, "broadcast: %s refuses SSZ bodies on %s; remembered for %u s", n->id,
               ROUTES[route].pattern, b->opts.ssz_memory_ms / 1000);
    bool newly_refused = m->state != s && s == BM_SSZ_REFUSED;
    m->state = s;
    m->since_ms = bm_clock_mono_now(b->clock);
    if (newly_refused && b->on_refusal)
        b->on_refusal(b->on_refusal_ud, (size_t)n->index, ROUTES[route].pattern);
}

void bm_broadcast_on_ssz_refusal(bm_broadcast_t *b, bm_broadcast_ssz_fn fn, void *ud)
{
    b->on_refusal = fn;
    b->on_refusal_ud = ud;
}

int bm_broadcast_learn_ssz_refusal(bm_broadcast_t *b, size_t node, const char *pattern,
                                   const char *version)
{
    const bm_node_t *n = bm_pool_node(b->pool, node);
    for (size_t r = 0; r < N_ROUTES; r++) {
        sszmem_t *m = mem_at(b, node, r);
        if (m && strcmp(ROUTES[r].pattern, pattern) == 0) {
            if (version && *version && n && n->version && strcmp(n->version, version) != 0)
                return 0; /* refused by the version the node ran before: stale */
            note_refusal_version(b, node, version);
            m->state = BM_SSZ_REFUSED;
            m->since_ms = bm_clock_mono_now(b->clock);
            return 0;
        }
    }
    return BM_ENOTFOUND;
}

void bm_broadcast_forget_node(bm_broadcast_t *b, size_t node)
{
    if (!b || node >= b->n_nodes)
        return;
    memset(&b->mem[node * N_ROUTES], 0, N_ROUTES * sizeof *b->mem);
    b->ver[node].v[0] = '\0';
}

void bm_broadcast_node_state(bm_node_t *node, bm_node_state_t old, void *ud)
{
    bm_broadcast_t *b = ud;
    bool was_gone = old == BM_NODE_UNKNOWN || old == BM_NODE_UNREACHABLE;
    bool is_gone = node->state == BM_NODE_UNKNOWN || node->state == BM_NODE_UNREACHABLE;
    if (!b || node->index < 0 || (size_t)node->index >= b->n_nodes || !was_gone || is_gone)
        return;
    /* the first sight of a node after a restart keeps what the state file restored: only
     * a node seen by this process going away and coming back may have been upgraded */
    if (b->restored[node->index])
        b->restored[node->index] = false;
    else
        bm_broadcast_forget_node(b, (size_t)node->index);
}

/* ---- contexts ------------------------------------------------------------------------------- */

static wctx_t *ctx_new(bm_broadcast_t *b, bm_req_t *req, size_t route)
{
    wctx_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    bm_link_init(&c->link);
    c->b = b;
    c->route = route;
    c->rt = &ROUTES[route];
    c->req = req;
    c->refs = 1;
    bm_hdrs_init(&c->hdrs);
    bm_hdrs_init(&c->err.hdrs);
    bm_hdrs_init(&c->r415.hdrs);
    c->target = strdup(bm_req_target(req));
    if (!c->target || bm_hdrs_copy(&c->hdrs, bm_req_headers(req)) != 0) {
        bm_hdrs_dispose(&c->hdrs);
        free(c->target);
        free(c);
        return NULL;
    }
    c->body = bm_buf_ref(bm_req_body(req));
    c->ssz = bm_content_type_is_ssz(bm_req_header(req, "Content-Type"));
    if (c->rt->cls == BM_BCAST_POOL || c->rt->cls == BM_BCAST_PUBLISH)
        c->merge = bm_indexed_new(); /* NULL on allocation failure: not merged */
    bm_list_push_front(&b->ctxs, &c->link);
    b->n_ctxs++;
    return c;
}

static void ctx_free(wctx_t *c)
{
    bm_broadcast_t *b = c->b;
    bm_link_unlink(&c->link);
    b->n_ctxs--;
    kept_dispose(&c->err);
    kept_dispose(&c->r415);
    bm_indexed_free(c->merge);
    bm_hdrs_dispose(&c->hdrs);
    bm_buf_unref(c->body);
    free(c->target);
    free(c);
}

static void ctx_unref(wctx_t *c)
{
    if (--c->refs == 0)
        ctx_free(c);
}

/* Leaves the waits still open (the client has its answer, or left). */
static void leave_waits(wctx_t *c)
{
    for (int p = 0; p < 2; p++)
        if (c->w[p]) {
            bm_race_waiter_t *w = c->w[p];
            c->w[p] = NULL;
            bm_race_leave(w);
        }
}

/* Answers the client (once) and drops the request's reference. */
static void respond(wctx_t *c, int status, const bm_hdrs_t *hdrs, bm_buf_t *body)
{
    if (!c->req)
        return;
    bm_req_t *req = c->req;
    c->req = NULL;
    c->client_status = status;
    if (bm_status_2xx(status)) {
        c->b->stats.answered_2xx++;
        bm_hist_add(&c->b->stats.first_2xx,
                    (double)(bm_clock_mono_us() - bm_req_start_us(req)) / 1e6);
    } else {
        c->b->stats.answered_error++;
    }
    leave_waits(c);
    bm_resp_send(req, status, NULL, body, hdrs);
    ctx_unref(c);
}

/* Answers a JSON body of our own (an error, or the merge of indexed errors). */
static void respond_json(wctx_t *c, int status, bm_buf_t *body)
{
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_hdrs_add_z(&h, "Content-Type", "application/json");
    respond(c, status, &h, body);
    bm_hdrs_dispose(&h);
}

static void respond_error(wctx_t *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void respond_error(wctx_t *c, int status, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    bm_buf_t *body = bm_race_error_body(status, msg);
    respond_json(c, status, body);
    bm_buf_unref(body);
}

static void respond_kept(wctx_t *c, const kept_t *k)
{
    respond(c, k->status, &k->hdrs, k->body);
}

static void on_client_abort(bm_req_t *req, void *ud)
{
    wctx_t *c = ud;
    if (!c->req)
        return;
    c->req = NULL;
    leave_waits(c); /* a write race goes on: the block still reaches the other nodes */
    bm_resp_end(req);
    ctx_unref(c);
}

/* ---- candidates ----------------------------------------------------------------------------- */

/* Moves `first` (when it is among the candidates) to the front. */
static bool put_first(bm_node_t **cand, size_t n, const bm_node_t *first)
{
    for (size_t i = 0; i < n; i++)
        if (cand[i] == first) {
            bm_node_t *f = cand[i];
            memmove(cand + 1, cand, i * sizeof *cand);
            cand[0] = f;
            return true;
        }
    return false;
}

/* The producing node of `slot`, when the production policy remembers it. */
static bm_node_t *producer_of(const bm_broadcast_t *b, uint64_t slot, uint8_t state_root[32],
                              bool *has_state_root)
{
    *has_state_root = false;
    if (!b->producer)
        return NULL;
    int idx = b->producer(b->producer_ud, slot, state_root, has_state_root);
    if (idx < 0 || (size_t)idx >= bm_pool_count(b->pool))
        return NULL;
    return bm_pool_node(b->pool, (size_t)idx);
}

/* Slot and state_root of the blinded block in the body (JSON or SSZ). */
static bool blinded_block_info(const wctx_t *c, uint64_t *slot, uint8_t state_root[32])
{
    if (!c->body || !c->body->len)
        return false;
    if (c->ssz) {
        bm_ssz_block_info_t info;
        const char *fork = bm_hdrs_get(&c->hdrs, "eth-consensus-version");
        if (!fork || bm_ssz_block_info((const uint8_t *)c->body->data, c->body->len, fork, true,
                                       false, BM_SSZ_BLOCK_PUBLISH, &info) != 0)
            return false;
        *slot = info.slot;
        memcpy(state_root, info.state_root, 32);
        return true;
    }
    json_object *o = NULL;
    if (bm_json_parse_buf(c->body, 0, &o, NULL) != 0)
        return false;
    bool ok = bm_json_get_u64(o, "/message/slot", slot) == 0 &&
              bm_json_get_root(o, "/message/state_root", state_root) == 0;
    json_object_put(o);
    return ok;
}

/* ---- writes --------------------------------------------------------------------------------- */

static double zero_score(const bm_race_answer_t *a, void *ud)
{
    (void)a;
    (void)ud;
    return 0;
}

static void write_policy(const bm_broadcast_t *b, bm_race_policy_t *pol)
{
    memset(pol, 0, sizeof *pol);
    pol->write = true;
    pol->hard_timeout_ms = bm_clock_wall_now(b->clock) + b->opts.write_timeout_ms;
    pol->connect_timeout_ms = b->opts.connect_timeout_ms;
    pol->max_response_bytes = MAX_WRITE_ANSWER;
}

static bool phases_pending(const wctx_t *c)
{
    if (!c->answered[0])
        return true;
    return c->two_phase && (!c->phase2_started || !c->answered[1]);
}

/* Answers the client with the merge of the nodes' indexed errors: 200 when every item was
 * taken somewhere, else a 400 with the items that failed on every node that answered. */
static void respond_merged(wctx_t *c)
{
    bm_buf_t *body = NULL;
    int status = bm_indexed_answer(c->merge, &body);
    c->b->stats.indexed_merged++;
    if (status == 200) {
        respond(c, 200, NULL, NULL);
        return;
    }
    if (status < 0) {
        respond_error(c, 503, "cannot merge the nodes' answers: out of memory");
        return;
    }
    respond_json(c, status, body);
    bm_buf_unref(body);
}

static void answer_failure(wctx_t *c);
static void scan_415(wctx_t *c, bm_race_t *r);

/* Every answer of a write. A pool or publish write merges indexed errors item by item, and
 * once every item was taken by some node the client has its 200, without waiting for the
 * nodes that have not answered (or the other phase). When every node that is not judged
 * unreachable has failed, the client has the most specific error at once: the unreachable
 * ones still get the write, detached, but a hung one would hold the answer a whole
 * writeTimeout. */
static void on_write_observe(bm_race_t *r, const bm_race_answer_t *a, void *ud)
{
    wctx_t *c = ud;
    bool ok = !a->err && a->node && bm_status_2xx(a->status);
    c->seen_2xx |= ok;
    if (c->merge && !a->err && a->node && a->node->index >= 0) {
        bm_indexed_add(c->merge, (size_t)a->node->index, a->node->id, a->status, a->body);
        if (c->req && !bm_status_2xx(a->status) && bm_indexed_active(c->merge) &&
            bm_indexed_all_taken(c->merge) &&
            !(c->ssz && (c->r415.set || c->skipped_refusers || a->status == 415)))
            respond_merged(c);
    }
    size_t ni = a->node && a->node->index >= 0 ? (size_t)a->node->index : BM_MAX_NODES;
    if (!c->n_waited || ni >= BM_MAX_NODES || !c->waits_for[ni])
        return;
    c->waits_for[ni] = false;
    c->n_waited--;
    if (!ok) {
        int rank = rank_of(a);
        if (!c->err.set || rank < c->err.rank)
            kept_set(&c->err, a, rank);
    }
    if (c->n_waited == 0 && !c->seen_2xx && c->req) {
        scan_415(c, r);
        answer_failure(c);
    }
}

/* Every phase answered without a 2xx: the most specific error, with the 415 rules. */
static void answer_failure(wctx_t *c)
{
    if (!c->req)
        return;
    if (c->ssz && (c->r415.set || c->skipped_refusers)) {
        /* no node took the SSZ copy, and a node that refuses SSZ may take JSON */
        if (c->r415.set)
            respond_kept(c, &c->r415);
        else
            respond_error(c, 415,
                          "no upstream took the SSZ body and some refuse SSZ on this endpoint: "
                          "resend it as JSON");
        return;
    }
    if (bm_indexed_active(c->merge)) {
        respond_merged(c);
        return;
    }
    if (c->err.set)
        respond_kept(c, &c->err);
    else
        respond_error(c, 503, "no upstream answered");
}

static void maybe_finish(wctx_t *c)
{
    if (c->req && !phases_pending(c))
        answer_failure(c);
}

/* Notes the 415 answers a race has so far (for the 415 rules). */
static void scan_415(wctx_t *c, bm_race_t *r)
{
    if (!c->ssz || !r || c->r415.set)
        return;
    size_t n;
    const bm_race_answer_t *v = bm_race_answers(r, &n);
    for (size_t i = 0; i < n; i++)
        if (!v[i].err && v[i].status == 415 && v[i].node) {
            kept_set(&c->r415, &v[i], 1);
            return;
        }
}

static void on_write_answer(wctx_t *c, int p, const bm_race_answer_t *a)
{
    c->w[p] = NULL;
    c->answered[p] = true;
    scan_415(c, c->race[p]);
    if (!c->req)
        return;
    if (bm_status_2xx(a->status) && !a->err && a->node) {
        /* a non-gossip write that a node refused as SSZ: the client must resend JSON */
        if (c->rt->cls != BM_BCAST_PUBLISH && c->r415.set) {
            respond_kept(c, &c->r415);
        } else {
            bm_req_add_upstream(c->req, a->node->index);
            respond(c, a->status, a->headers, a->body);
        }
        return;
    }
    int rank = rank_of(a);
    if (!c->err.set || rank < c->err.rank)
        kept_set(&c->err, a, rank);
    maybe_finish(c);
}

static void on_answer0(bm_race_waiter_t *w, const bm_race_answer_t *a, void *ud)
{
    (void)w;
    on_write_answer(ud, 0, a);
}

static void on_answer1(bm_race_waiter_t *w, const bm_race_answer_t *a, void *ud)
{
    (void)w;
    on_write_answer(ud, 1, a);
}

static void start_phase2(wctx_t *c);

/* Gives a state write that a node took to replay (once). */
static void feed_replay(wctx_t *c)
{
    bm_broadcast_t *b = c->b;
    if (c->fed || c->rt->replay == NO_REPLAY || !b->replay)
        return;
    c->fed = true;
    bm_replay_feed(b->replay, (bm_replay_kind_t)c->rt->replay, &c->hdrs, c->body,
                   bm_clock_wall_now(b->clock));
}

/* The race's decision, for replay: fed at the first 2xx rather than when the last node
 * answered (a hung node would hold it for a whole writeTimeout), client or no client. */
static void on_feed_answer(bm_race_waiter_t *w, const bm_race_answer_t *a, void *ud)
{
    (void)w;
    if (!a->err && a->node && bm_status_2xx(a->status))
        feed_replay(ud);
}

static void on_write_complete(wctx_t *c, int p, const bm_race_answer_t *v, size_t n)
{
    bm_broadcast_t *b = c->b;
    bool any_2xx = false;
    bm_str_t line = BM_STR_INIT;
    bool debug = bm_log_enabled(BM_LOG_DEBUG);
    for (size_t i = 0; i < n; i++) {
        const bm_race_answer_t *a = &v[i];
        bool ok = !a->err && bm_status_2xx(a->status);
        any_2xx |= ok;
        size_t ni = a->node ? (size_t)a->node->index : BM_BROADCAST_NODE_STATS;
        if (ok)
            b->stats.node_deliveries++;
        else
            b->stats.node_failures++;
        if (ni < BM_BROADCAST_NODE_STATS)
            (ok ? b->stats.deliveries_by : b->stats.failures_by)[ni]++;
        if (!a->err && c->ssz) {
            mem_learn(b, a->node, c->route, a->status);
            if (a->status == 415) {
                if (!c->r415.set)
                    kept_set(&c->r415, a, 1);
                if (bm_status_2xx(c->client_status)) {
                    /* the client will not resend: gossip carries pool objects to that node,
                     * and replay gives it the node-local state as JSON */
                    b->stats.ssz_refused_late++;
                    if (c->rt->replay != NO_REPLAY && b->replay)
                        bm_replay_node(b->replay, a->node, "refused an SSZ write");
                }
            }
        }
        if (debug) {
            if (a->err)
                bm_str_printf(&line, "%s%s: %s", i ? ", " : "", a->node->id, bm_strerror(a->err));
            else
                bm_str_printf(&line, "%s%s: %d in %llu ms", i ? ", " : "", a->node->id, a->status,
                              (unsigned long long)(a->elapsed_us / 1000));
        }
    }
    if (debug)
        bm_log(BM_LOG_DEBUG, "broadcast %s %s%s: %s", c->rt->method, c->target,
               c->two_phase ? (p == 0 ? " (producer)" : " (others)") : "", bm_str_data(&line));
    bm_str_dispose(&line);
    /* every item taken somewhere (duplicates included) is not a failure, 2xx or not */
    bool merged_taken = bm_indexed_active(c->merge) && bm_indexed_all_taken(c->merge);
    if (!any_2xx && n && !merged_taken)
        bm_log_limited(&b->lim, BM_LOG_WARN, "broadcast %s %s%s: no node took it", c->rt->method,
                       c->target, c->two_phase && p == 0 ? " (producer)" : "");
    if (any_2xx)
        feed_replay(c);
    c->race[p] = NULL;
    if (p == 0 && c->two_phase && !c->phase2_started)
        start_phase2(c);
    ctx_unref(c);
}

static void on_complete0(bm_race_t *r, const bm_race_answer_t *v, size_t n, void *ud)
{
    (void)r;
    on_write_complete(ud, 0, v, n);
}

static void on_complete1(bm_race_t *r, const bm_race_answer_t *v, size_t n, void *ud)
{
    (void)r;
    on_write_complete(ud, 1, v, n);
}

/* Starts one write race over `nodes`; the client waits on it when still there. */
static int start_write(wctx_t *c, int p, bm_node_t *const *nodes, size_t n, uint32_t grace_ms)
{
    bm_broadcast_t *b = c->b;
    bm_race_policy_t pol;
    write_policy(b, &pol);
    pol.observe = on_write_observe;
    pol.ud = c; /* borrowed: the context outlives its races (they hold references) */
    if (p == 0 && !c->two_phase) {
        size_t waited = 0;
        for (size_t i = 0; i < n; i++)
            waited += client_waits_for(nodes[i]);
        if (waited > 0 && waited < n) /* else the error waits for every node, as it did */
            for (size_t i = 0; i < n; i++)
                if (client_waits_for(nodes[i]) && nodes[i]->index >= 0 &&
                    (size_t)nodes[i]->index < BM_MAX_NODES) {
                    c->waits_for[nodes[i]->index] = true;
                    c->n_waited++;
                }
    }
    if (grace_ms) {
        pol.score = zero_score;
        pol.grace_ms = grace_ms;
    }
    bm_race_request_t rq = {c->rt->method, c->target, &c->hdrs, c->body};
    bm_race_t *r =
        bm_race_start(b->race, &rq, nodes, n, &pol, NULL, p == 0 ? on_complete0 : on_complete1, c);
    if (!r)
        return BM_ENOMEM;
    c->race[p] = r;
    c->refs++;
    /* the client's waiter first, replay's second: waiters run in this order on the same
     * answer, so the client has its answer before the write is fed to replay (which parses
     * the body again and, with shared state, renders every entry for Redis: bench/shared.py
     * measured that work inside the write's answer time). Both run before the loop moves on,
     * so nothing can see the answer without the entries. The completion's reference
     * outlives both waiters: waiters are answered first. */
    if (c->req) {
        c->w[p] = bm_race_wait(r, p == 0 ? on_answer0 : on_answer1, c);
        if (!c->w[p])
            c->answered[p] = true; /* cannot happen but on allocation failure */
    } else {
        c->answered[p] = true;
    }
    if (c->rt->replay != NO_REPLAY && b->replay)
        bm_race_wait(r, on_feed_answer, c);
    return 0;
}

static void arm_timer(bm_broadcast_t *b);

static void start_phase2(wctx_t *c)
{
    c->phase2_started = true;
    c->headstart_at = 0;
    if (start_write(c, 1, c->rest, c->n_rest, 0) != 0) {
        c->answered[1] = true;
        bm_log_limited(&c->b->lim, BM_LOG_WARN,
                       "broadcast %s: cannot send to the nodes after the producer", c->target);
    }
    maybe_finish(c);
}

static void on_timer(bm_timer_t *t, void *ud)
{
    (void)t;
    bm_broadcast_t *b = ud;
    uint64_t now = bm_clock_mono_now(b->clock);
    bm_link_t *l, *nx;
    bm_list_for_each_safe (l, nx, &b->ctxs) {
        wctx_t *c = bm_list_entry(l, wctx_t, link);
        if (c->headstart_at && c->headstart_at <= now && !c->phase2_started) {
            c->refs++;
            start_phase2(c);
            ctx_unref(c);
        }
    }
    arm_timer(b);
}

static void arm_timer(bm_broadcast_t *b)
{
    if (b->stopped)
        return;
    uint64_t next = 0;
    for (const bm_link_t *l = b->ctxs.next; l != &b->ctxs; l = l->next) {
        const wctx_t *c = bm_list_entry(l, wctx_t, link);
        if (c->headstart_at && !c->phase2_started && (!next || c->headstart_at < next))
            next = c->headstart_at;
    }
    if (!next) {
        bm_timer_stop(b->timer);
        return;
    }
    uint64_t now = bm_clock_mono_now(b->clock);
    bm_timer_start(b->timer, next > now ? next - now : 0);
}

/* Chooses the producer-first split for a blinded block; false: one phase to everyone. */
static bool plan_producer_first(wctx_t *c, bm_node_t **send, size_t n_send)
{
    bm_broadcast_t *b = c->b;
    uint64_t slot;
    uint8_t body_root[32], known_root[32];
    bool has_root;
    if (n_send < 2 || !blinded_block_info(c, &slot, body_root))
        return false;
    bm_node_t *prod = producer_of(b, slot, known_root, &has_root);
    if (!prod || (has_root && memcmp(known_root, body_root, 32) != 0))
        return false; /* unknown, or another node's block: nobody is special */
    if (!client_waits_for(prod) || !put_first(send, n_send, prod))
        return false; /* no head start for a node that may be gone, or refusing this body */
    c->two_phase = true;
    c->n_rest = n_send - 1;
    memcpy(c->rest, send + 1, c->n_rest * sizeof *send);
    c->headstart_at = bm_clock_mono_now(b->clock) + b->opts.producer_headstart_ms;
    b->stats.producer_first++;
    return true;
}

static void serve_write(wctx_t *c)
{
    bm_broadcast_t *b = c->b;
    bm_node_t *cand[BM_MAX_NODES];
    /* Unreachable nodes too (last): the verdict can be a moment old or a moment wrong (one
     * head probe unanswered in 250 ms under load), and a submission that is not replayed
     * (an attestation, a block, an exit) sent to nobody there would be lost to that node.
     * A node that is really gone refuses the connection at once or costs one connect
     * timeout; the client never waits on it (client_waits_for). */
    size_t n = bm_pool_candidates(b->pool, BM_POOL_PREFER_ANY, true, cand, BM_MAX_NODES);
    if (n == 0) {
        respond_error(c, 503, "no usable upstream");
        return;
    }
    bm_node_t *send[BM_MAX_NODES];
    size_t n_send = 0;
    uint32_t grace = 0;
    if (c->ssz) {
        const char *refusers = NULL;
        bool unknown = false;
        for (size_t i = 0; i < n; i++) {
            bm_ssz_support_t s = bm_broadcast_ssz_support(b, (size_t)cand[i]->index, c->route);
            if (s == BM_SSZ_REFUSED) {
                refusers = refusers ? refusers : cand[i]->id;
                continue;
            }
            unknown |= s == BM_SSZ_UNKNOWN && client_waits_for(cand[i]);
            send[n_send++] = cand[i];
        }
        if (refusers && c->rt->cls != BM_BCAST_PUBLISH) {
            /* answered before anything is sent: the JSON resend reaches every node once */
            b->stats.ssz_refused_at_once++;
            respond_error(c, 415,
                          "upstream %s does not accept SSZ bodies on this endpoint: resend "
                          "it as JSON",
                          refusers);
            return;
        }
        if (n_send == 0) {
            b->stats.ssz_refused_at_once++;
            respond_error(c, 415,
                          "no upstream accepts SSZ bodies on this endpoint: resend it "
                          "as JSON");
            return;
        }
        if (refusers && c->rt->producer_first) {
            /* the producer may be the only node able to unblind it: it must get it, as JSON */
            uint64_t slot;
            uint8_t root[32], known[32];
            bool has;
            bm_node_t *prod =
                blinded_block_info(c, &slot, root) ? producer_of(b, slot, known, &has) : NULL;
            if (prod && (!has || memcmp(known, root, 32) == 0) &&
                bm_broadcast_ssz_support(b, (size_t)prod->index, c->route) == BM_SSZ_REFUSED) {
                b->stats.ssz_refused_at_once++;
                respond_error(c, 415,
                              "upstream %s produced this block and does not accept SSZ bodies: "
                              "resend it as JSON",
                              prod->id);
                return;
            }
        }
        c->skipped_refusers = refusers != NULL;
        if (unknown && c->rt->cls != BM_BCAST_PUBLISH)
            grace = b->opts.ssz_probe_grace_ms;
    } else {
        memcpy(send, cand, n * sizeof *cand);
        n_send = n;
    }
    if (c->rt->producer_first && plan_producer_first(c, send, n_send)) {
        if (start_write(c, 0, send, 1, 0) != 0) {
            /* the producer could not be asked: everyone at once */
            c->two_phase = false;
            c->headstart_at = 0;
        } else {
            arm_timer(b);
            return;
        }
    }
    if (start_write(c, 0, send, n_send, grace) != 0)
        respond_error(c, 503, "cannot start the broadcast: out of memory");
}

/* ---- reads ------------------------------------------------------------------------------------
 */

static void on_read_answer(bm_race_waiter_t *w, const bm_race_answer_t *a, void *ud)
{
    wctx_t *c = ud;
    (void)w;
    c->w[0] = NULL;
    if (c->req && a->node)
        bm_req_add_upstream(c->req, a->node->index);
    respond(c, a->status, a->headers, a->body);
}

static void serve_read(wctx_t *c, const bm_route_params_t *params)
{
    bm_broadcast_t *b = c->b;
    bm_node_t *cand[BM_MAX_NODES];
    size_t n = bm_pool_candidates(b->pool, BM_POOL_PREFER_ANSWERING, true, cand, BM_MAX_NODES);
    if (n == 0) {
        respond_error(c, 503, "no usable upstream");
        return;
    }
    bm_race_policy_t pol;
    memset(&pol, 0, sizeof pol);
    pol.sequential = true;
    pol.connect_timeout_ms = b->opts.connect_timeout_ms;
    pol.hard_timeout_ms = bm_clock_wall_now(b->clock) + b->opts.write_timeout_ms;
    if (c->rt->cls == BM_BCAST_PRODUCER_READ) {
        pol.transfer_timeout_ms = b->opts.read_timeout_ms;
        char s[32];
        uint64_t slot;
        uint8_t root[32];
        bool has;
        int len = params ? bm_route_param(params, "slot", s, sizeof s) : -1;
        bm_node_t *prod = len > 0 && bm_json_parse_u64(s, (size_t)len, &slot) == 0
                              ? producer_of(b, slot, root, &has)
                              : NULL;
        if (prod && put_first(cand, n, prod))
            b->stats.producer_first++;
    } else {
        /* DVT selections: the middleware may wait for its peers' partial proofs */
        pol.transfer_timeout_ms = b->opts.write_timeout_ms;
    }
    bm_race_request_t rq = {c->rt->method, c->target, &c->hdrs, c->body};
    bm_race_t *r = bm_race_start(b->race, &rq, cand, n, &pol, NULL, NULL, NULL);
    if (r)
        c->w[0] = bm_race_wait(r, on_read_answer, c);
    if (!r || !c->w[0])
        respond_error(c, 503, "cannot start the request: out of memory");
}

/* ---- routes ------------------------------------------------------------------------------------
 */

static void serve(bm_broadcast_t *b, bm_req_t *req, size_t route, const bm_route_params_t *params)
{
    b->stats.requests++;
    wctx_t *c = ctx_new(b, req, route);
    if (!c) {
        bm_resp_error(req, 500, "out of memory");
        return;
    }
    bm_req_on_abort(req, on_client_abort, c);
    c->refs++; /* held while serving: an answer may come before we return */
    if (c->rt->cls == BM_BCAST_SELECTIONS || c->rt->cls == BM_BCAST_PRODUCER_READ)
        serve_read(c, params);
    else
        serve_write(c);
    ctx_unref(c);
}

static void on_route(bm_req_t *req, const bm_route_params_t *params, void *ud)
{
    route_ud_t *ru = ud;
    serve(ru->b, req, ru->route, params);
}

int bm_broadcast_register(bm_broadcast_t *b, bm_router_t *r)
{
    if (!b || !r)
        return BM_EINVAL;
    for (size_t i = 0; i < N_ROUTES; i++) {
        int rc = bm_router_add(r, ROUTES[i].method, ROUTES[i].pattern, on_route, &b->rud[i]);
        if (rc)
            return rc;
    }
    return 0;
}

/* ---- lifetime ------------------------------------------------------------------------------- */

/* Seconds to a write's first 2xx: a node on the LAN answers within milliseconds, a block
 * publication takes up to a second or two. */
static const double first_2xx_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                          0.1,   0.25,   0.5,   1,    2};

bm_broadcast_t *bm_broadcast_new(bm_clock_t *clock, bm_race_engine_t *race, bm_pool_t *pool,
                                 bm_replay_t *replay, const bm_broadcast_opts_t *opts)
{
    if (!clock || !race || !pool)
        return NULL;
    bm_broadcast_t *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    bm_hist_init(&b->stats.first_2xx, first_2xx_bounds,
                 sizeof first_2xx_bounds / sizeof first_2xx_bounds[0]);
    bm_link_init(&b->ctxs);
    bm_broadcast_opts_t def;
    bm_broadcast_opts_default(&def);
    b->opts = opts ? *opts : def;
    if (!b->opts.write_timeout_ms)
        b->opts.write_timeout_ms = def.write_timeout_ms;
    if (!b->opts.connect_timeout_ms)
        b->opts.connect_timeout_ms = def.connect_timeout_ms;
    if (!b->opts.read_timeout_ms)
        b->opts.read_timeout_ms = def.read_timeout_ms;
    if (!b->opts.ssz_memory_ms)
        b->opts.ssz_memory_ms = def.ssz_memory_ms;
    b->clock = clock;
    b->race = race;
    b->pool = pool;
    b->replay = replay;
    b->n_nodes = bm_pool_count(pool);
    b->mem = calloc(b->n_nodes ? b->n_nodes * N_ROUTES : 1, sizeof *b->mem);
    b->restored = calloc(b->n_nodes ? b->n_nodes : 1, sizeof *b->restored);
    b->ver = calloc(b->n_nodes ? b->n_nodes : 1, sizeof *b->ver);
    b->timer = bm_timer_new(clock, on_timer, b);
    if (!b->mem || !b->restored || !b->ver || !b->timer) {
        if (b->timer)
            bm_timer_close(b->timer, NULL, NULL);
        free(b->mem);
        free(b->restored);
        free(b->ver);
        free(b);
        return NULL;
    }
    for (size_t i = 0; i < N_ROUTES; i++) {
        b->rud[i].b = b;
        b->rud[i].route = i;
    }
    return b;
}

void bm_broadcast_set_producer(bm_broadcast_t *b, bm_broadcast_producer_fn fn, void *ud)
{
    b->producer = fn;
    b->producer_ud = ud;
}

size_t bm_broadcast_active(const bm_broadcast_t *b)
{
    return b ? b->n_ctxs : 0;
}

static void on_timer_closed(void *ud)
{
    bm_broadcast_t *b = ud;
    b->timer_closed = true;
}

void bm_broadcast_stop(bm_broadcast_t *b)
{
    if (!b || b->stopped)
        return;
    /* the blocks still waiting for their producer go to the others now */
    bm_link_t *l, *nx;
    bm_list_for_each_safe (l, nx, &b->ctxs) {
        wctx_t *c = bm_list_entry(l, wctx_t, link);
        if (c->headstart_at && !c->phase2_started) {
            c->refs++;
            start_phase2(c);
            ctx_unref(c);
        }
    }
    b->stopped = true;
    bm_timer_close(b->timer, on_timer_closed, b);
}

void bm_broadcast_free(bm_broadcast_t *b)
{
    if (!b)
        return;
    bm_assert(b->stopped && b->timer_closed);
    while (!bm_list_empty(&b->ctxs))
        ctx_free(bm_list_first(&b->ctxs, wctx_t, link));
    free(b->mem);
    free(b->restored);
    free(b->ver);
    free(b);
}

void bm_broadcast_stats(const bm_broadcast_t *b, bm_broadcast_stats_t *out)
{
    *out = b->stats;
}

/* ---- state kept across restarts (app/statedir.h) -------------------------------------------- */

int bm_broadcast_export_ssz(const bm_broadcast_t *b, uint64_t now_ms, bm_str_t *out)
{
    if (!b)
        return BM_EINVAL;
    uint64_t mono = bm_clock_mono_now(b->clock);
    bm_str_putc(out, '[');
    size_t k = 0;
    for (size_t n = 0; n < b->n_nodes; n++) {
        const bm_node_t *node = bm_pool_node(b->pool, n);
        for (size_t r = 0; node && r < N_ROUTES; r++) {
            if (bm_broadcast_ssz_support(b, n, r) != BM_SSZ_REFUSED)
                continue;
            uint64_t age = mono - mem_at(b, n, r)->since_ms;
            bm_str_puts(out, k++ ? ",{\"node\":" : "{\"node\":");
            bm_str_json_string(out, node->id, strlen(node->id));
            bm_str_printf(out, ",\"method\":\"%s\",\"route\":", ROUTES[r].method);
            bm_str_json_string(out, ROUTES[r].pattern, strlen(ROUTES[r].pattern));
            bm_str_puts(out, ",\"sinceMs\":\"");
            bm_str_u64(out, now_ms > age ? now_ms - age : 0);
            bm_str_putc(out, '"');
            if (*b->ver[n].v) {
                bm_str_puts(out, ",\"version\":");
                bm_str_json_string(out, b->ver[n].v, strlen(b->ver[n].v));
            }
            bm_str_putc(out, '}');
        }
    }
    bm_str_putc(out, ']');
    return out->oom ? BM_ENOMEM : 0;
}

static int route_index(const char *method, const char *pattern)
{
    for (size_t r = 0; r < N_ROUTES; r++)
        if (!strcmp(ROUTES[r].method, method) && !strcmp(ROUTES[r].pattern, pattern))
            return (int)r;
    return -1;
}

/* One remembered refusal: a node and route still configured, not older than the memory. */
static int import_refusal(bm_broadcast_t *b, json_object *e, uint64_t now_ms, uint64_t mono)
{
    json_object *jn, *jm, *jr;
    uint64_t since;
    if (!json_object_is_type(e, json_type_object) || !json_object_object_get_ex(e, "node", &jn) ||
        !json_object_object_get_ex(e, "method", &jm) ||
        !json_object_object_get_ex(e, "route", &jr) || !json_object_is_type(jn, json_type_string) ||
        !json_object_is_type(jm, json_type_string) || !json_object_is_type(jr, json_type_string) ||
        bm_json_get_u64(e, "/sinceMs", &since) != 0)
        return 0;
    const bm_node_t *node = bm_pool_find(b->pool, json_object_get_string(jn));
    int r = route_index(json_object_get_string(jm), json_object_get_string(jr));
    uint64_t age = now_ms > since ? now_ms - since : 0;
    if (!node || node->index < 0 || r < 0 || age >= b->opts.ssz_memory_ms)
        return 0;
    sszmem_t *m = mem_at(b, (size_t)node->index, (size_t)r);
    if (!m || m->state != BM_SSZ_UNKNOWN)
        return 0;    /* what this process learned itself is newer */
    json_object *jv; /* files written before the version was kept have none */
    if (json_object_object_get_ex(e, "version", &jv) && json_object_is_type(jv, json_type_string))
        snprintf(b->ver[node->index].v, sizeof b->ver[node->index].v, "%s",
                 json_object_get_string(jv));
    m->state = BM_SSZ_REFUSED;
    m->since_ms = mono > age ? mono - age : 0;
    b->restored[node->index] = true;
    return 1;
}

int bm_broadcast_import_ssz(bm_broadcast_t *b, const char *json, size_t len, uint64_t now_ms)
{
    json_object *arr = NULL;
    if (!b || bm_json_parse(json, len, 0, &arr, NULL) != 0)
        return BM_EINVAL;
    if (!json_object_is_type(arr, json_type_array)) {
        json_object_put(arr);
        return BM_EINVAL;
    }
    uint64_t mono = bm_clock_mono_now(b->clock);
    int n = 0;
    for (size_t i = 0; i < json_object_array_length(arr); i++)
        n += import_refusal(b, json_object_array_get_idx(arr, i), now_ms, mono);
    json_object_put(arr);
    return n;
}
