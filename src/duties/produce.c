/* SPDX-License-Identifier: MIT */
/*
 * produce: block production as a race judged by the block's parent (see produce.h for the
 * rules, docs/duties.md for why).
 *
 * How it is built:
 *   - one judging context per race, carried by the race (duties/serve.h). It caches the
 *     last answer it parsed, because the engine asks accept, usable and score about the
 *     same answer in a row and a JSON block with blobs is megabytes;
 *   - best value is a total order on 256-bit values, but the engine compares scores as
 *     doubles, which cannot tell 2^64 from 2^64 + 1. So each race keeps the values it has
 *     seen in order and gives every new value a double placed between its neighbours'
 *     (an online order-preserving embedding): every comparison the engine makes is then
 *     exact, and equal values get equal scores (the first to arrive wins among equals);
 *   - the race's answer goes to the client as it is; the node that produced it is
 *     remembered per slot in a ring of BM_PRODUCE_MEMORY_SLOTS entries.
 */
#include "duties/produce.h"

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/defaults.h"
#include "base/err.h"
#include "base/json.h"
#include "base/log.h"
#include "base/url.h"
#include "base/ssz.h"
#include "cluster/head.h"
#include "duties/serve.h"

typedef struct value_rank {
    bm_produce_block_t blk; /* only the fields the order reads */
    double score;
} value_rank_t;

typedef struct pctx {
    bm_produce_t *p;
    uint64_t slot;
    bm_produce_form_t form;
    uint64_t boost;
    bool usable_taken; /* the first 2xx that was not accepted is the deadline fallback */
    /* the last answer parsed, for the predicates that follow on the same answer */
    bool has_last;
    const bm_node_t *last_node; /* (node, attempt) names one answer within a race */
    unsigned last_attempt;
    const bm_buf_t *last_body;
    int last_rc;
    bm_produce_block_t last;
    value_rank_t *ranks; /* sorted by value, ascending */
    size_t n_ranks, cap_ranks;
} pctx_t;

typedef struct memo {
    bool used;
    uint64_t slot;
    int node;
    bool has_state_root;
    uint8_t state_root[32];
    uint64_t time_ms; /* wall time served or learnt: newer wins between two records */
} memo_t;

struct bm_produce {
    bm_clock_t *clock;
    bm_race_engine_t *race;
    bm_pool_t *pool;
    bm_hint_t *hint;
    bm_shadow_t *shadow; /* the shadow nodes every race is mirrored to, or NULL */
    bm_produce_opts_t opts;
    bm_produce_stats_t stats;
    memo_t memo[BM_PRODUCE_MEMORY_SLOTS];
    bm_log_limit_t lim;
    bm_served_fn served_fn; /* records of served productions (bm_produce_on_served), or NULL */
    void *served_ud;
    bool witness;
    bm_produce_remember_fn on_remember; /* shared state: each production served */
    void *on_remember_ud;
};

void bm_produce_on_served(bm_produce_t *p, bm_served_fn fn, void *ud, bool witness)
{
    p->served_fn = fn;
    p->served_ud = ud;
    p->witness = witness;
}

void bm_produce_opts_default(bm_produce_opts_t *o)
{
    o->proposal_deadline_ms = BM_DEFAULT_DUTIES_PROPOSAL_DEADLINE_MS;
    o->selection = BM_PRODUCE_DEFAULT_SELECTION;
    o->best_value_grace_ms = BM_DEFAULT_DUTIES_BEST_VALUE_GRACE_MS;
    o->repoll_interval_ms = 250;
    o->connect_timeout_ms = BM_DEFAULT_TIMEOUTS_CONNECT_MS;
    o->max_hold_ms = BM_DEFAULT_DUTIES_MAX_HOLD_MS;
}

bm_produce_t *bm_produce_new(bm_clock_t *clock, bm_race_engine_t *race, bm_pool_t *pool,
                             bm_hint_t *hint, const bm_produce_opts_t *opts)
{
    if (!clock || !race || !pool || !hint)
        return NULL;
    bm_produce_t *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->clock = clock;
    p->race = race;
    p->pool = pool;
    p->hint = hint;
    if (opts)
        p->opts = *opts;
    else
        bm_produce_opts_default(&p->opts);
    if (!p->opts.repoll_interval_ms)
        p->opts.repoll_interval_ms = 250;
    if (!p->opts.max_hold_ms)
        p->opts.max_hold_ms = BM_DEFAULT_DUTIES_MAX_HOLD_MS;
    return p;
}

void bm_produce_set_shadow(bm_produce_t *p, bm_shadow_t *shadow)
{
    p->shadow = shadow;
}

/* A shadow node's block is about its parent (duties/shadow.h); `arg` is the form. */
static bool shadow_read_block(const bm_hdrs_t *h, const bm_buf_t *body, uint32_t arg,
                              bm_shadow_view_t *out)
{
    bm_produce_block_t b;
    if (bm_produce_parse_form(h, body, (bm_produce_form_t)arg, &b) != 0)
        return false;
    out->has_root = true;
    memcpy(out->root, b.parent_root, 32);
    return true;
}

void bm_produce_free(bm_produce_t *p)
{
    free(p);
}

bm_produce_stats_t bm_produce_stats(const bm_produce_t *p)
{
    return p->stats;
}

int bm_produce_node_for_slot(const bm_produce_t *p, uint64_t slot, uint8_t state_root[32],
                             bool *has_state_root)
{
    const memo_t *m = &p->memo[slot % BM_PRODUCE_MEMORY_SLOTS];
    if (has_state_root)
        *has_state_root = false;
    if (!m->used || m->slot != slot)
        return -1;
    if (state_root && m->has_state_root) {
        memcpy(state_root, m->state_root, 32);
        if (has_state_root)
            *has_state_root = true;
    }
    return m->node;
}

static void remember(bm_produce_t *p, uint64_t slot, int node, const bm_produce_block_t *b)
{
    memo_t *m = &p->memo[slot % BM_PRODUCE_MEMORY_SLOTS];
    m->used = true;
    m->slot = slot;
    m->node = node;
    m->has_state_root = b && b->has_state_root;
    if (m->has_state_root)
        memcpy(m->state_root, b->state_root, 32);
    m->time_ms = bm_clock_wall_now(p->clock);
    if (p->on_remember)
        p->on_remember(p->on_remember_ud, slot, node, m->has_state_root ? m->state_root : NULL,
                       m->time_ms);
}

void bm_produce_on_remember(bm_produce_t *p, bm_produce_remember_fn fn, void *ud)
{
    p->on_remember = fn;
    p->on_remember_ud = ud;
}

void bm_produce_learn(bm_produce_t *p, uint64_t slot, int node, const uint8_t *state_root,
                      uint64_t time_ms)
{
    memo_t *m = &p->memo[slot % BM_PRODUCE_MEMORY_SLOTS];
    if (m->used && m->slot > slot)
        return; /* the ring moved on past it */
    if (m->used && m->slot == slot && m->time_ms > time_ms)
        return; /* a later production of the slot is held: newer wins */
    m->used = true;
    m->time_ms = time_ms;
    m->slot = slot;
    m->node = node;
    m->has_state_root = state_root != NULL;
    if (state_root)
        memcpy(m->state_root, state_root, 32);
}

void bm_produce_each(const bm_produce_t *p, bm_produce_remember_fn fn, void *ud)
{
    for (size_t i = 0; i < BM_PRODUCE_MEMORY_SLOTS; i++) {
        const memo_t *m = &p->memo[i];
        if (m->used)
            fn(ud, m->slot, m->node, m->has_state_root ? m->state_root : NULL, m->time_ms);
    }
}

/* ---- reading a produced block ------------------------------------------------------------- */

static bool header_true(const bm_hdrs_t *h, const char *name, bool *present)
{
    const char *v = bm_hdrs_get(h, name);
    if (present)
        *present = v != NULL;
    return v && strcasecmp(v, "true") == 0;
}

/* A decimal Wei value from a header; true when present (BM_EINVAL in *rc when malformed). */
static bool header_value(const bm_hdrs_t *h, const char *name, bm_u256_t *out, int *rc)
{
    const char *v = bm_hdrs_get(h, name);
    if (!v)
        return false;
    while (*v == ' ' || *v == '\t')
        v++;
    size_t n = strlen(v);
    while (n && (v[n - 1] == ' ' || v[n - 1] == '\t'))
        n--;
    if (bm_u256_parse(v, n, out) != 0)
        *rc = BM_EINVAL;
    return true;
}

static bool json_value(struct json_object *j, const char *ptr, bm_u256_t *out, int *rc)
{
    struct json_object *v = bm_json_get(j, ptr);
    if (!v)
        return false;
    const char *s = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
    if (!s || bm_u256_parse_z(s, out) != 0)
        *rc = BM_EINVAL;
    return true;
}

int bm_produce_parse(const bm_hdrs_t *headers, const bm_buf_t *body, bool v4,
                     bm_produce_block_t *out)
{
    return bm_produce_parse_form(headers, body, v4 ? BM_PRODUCE_FORM_V4 : BM_PRODUCE_FORM_V3, out);
}

int bm_produce_parse_form(const bm_hdrs_t *headers, const bm_buf_t *body, bm_produce_form_t form,
                          bm_produce_block_t *out)
{
    if (!headers || !body)
        return BM_EINVAL;
    bool v4 = form == BM_PRODUCE_FORM_V4;
    bm_produce_block_t b;
    memset(&b, 0, sizeof b);
    int rc = 0;
    bool blinded_hdr = false, included_hdr = false;
    bool blinded = header_true(headers, "eth-execution-payload-blinded", &blinded_hdr);
    /* v3 says in a header (or field) whether its block is blinded; the legacy forms are one
     * kind each: v2 a full block, blinded_blocks a blinded one */
    b.blinded = form == BM_PRODUCE_FORM_V3 ? blinded : form == BM_PRODUCE_FORM_BLINDED_V1;
    bool included = header_true(headers, "eth-execution-payload-included", &included_hdr);
    bool has_c = header_value(headers, "eth-consensus-block-value", &b.consensus, &rc);
    bool has_e = !v4 && header_value(headers, "eth-execution-payload-value", &b.execution, &rc);
    if (rc)
        return rc;
    if (bm_hdrs_is_ssz(headers)) {
        const char *fork = bm_hdrs_get(headers, "eth-consensus-version");
        bm_ssz_block_info_t info;
        if (!fork || (form == BM_PRODUCE_FORM_V3 && !blinded_hdr) || (v4 && !included_hdr))
            return BM_EINVAL; /* the layout cannot be told without them */
        if (bm_ssz_block_info((const uint8_t *)body->data, body->len, fork, b.blinded, included,
                              v4 ? BM_SSZ_BLOCK_PRODUCE_V4 : BM_SSZ_BLOCK_PRODUCE_V3, &info) != 0)
            return BM_EINVAL;
        b.slot = info.slot;
        memcpy(b.parent_root, info.parent_root, 32);
        memcpy(b.state_root, info.state_root, 32);
        b.has_state_root = true;
    } else {
        struct json_object *j = NULL;
        if (bm_json_parse_buf(body, 0, &j, NULL) != 0 || !j) {
            json_object_put(j);
            return BM_EINVAL;
        }
        /* BlockContents {block, ...} or a bare (Blinded)BeaconBlock */
        const char *base = bm_json_get(j, "/data/block/parent_root") ? "/data/block" : "/data";
        char ptr[32];
        snprintf(ptr, sizeof ptr, "%s/parent_root", base);
        if (bm_json_get_root(j, ptr, b.parent_root) != 0)
            rc = BM_EINVAL;
        snprintf(ptr, sizeof ptr, "%s/slot", base);
        if (!rc && bm_json_get_u64(j, ptr, &b.slot) != 0)
            rc = BM_EINVAL;
        snprintf(ptr, sizeof ptr, "%s/state_root", base);
        if (!rc && bm_json_get_root(j, ptr, b.state_root) == 0)
            b.has_state_root = true;
        if (!rc && !blinded_hdr && form == BM_PRODUCE_FORM_V3) {
            bool bl;
            if (bm_json_get_bool(j, "/execution_payload_blinded", &bl) == 0)
                b.blinded = bl;
        }
        if (!rc && !has_c)
            has_c = json_value(j, "/consensus_block_value", &b.consensus, &rc);
        if (!rc && !has_e && !v4)
            has_e = json_value(j, "/execution_payload_value", &b.execution, &rc);
        json_object_put(j);
        if (rc)
            return rc;
    }
    b.has_value = has_c || has_e;
    *out = b;
    return 0;
}

bool bm_produce_parent_ok(const bm_expected_t *e, bool head_late, const uint8_t parent[32])
{
    if (!e->known)
        return true;
    if (memcmp(e->root, parent, 32) == 0)
        return true;
    return head_late && e->parent_known && memcmp(e->parent, parent, 32) == 0;
}

/* The key a block is ranked by: (tier, value). With boost 0 a builder's block is in the
 * lower tier (every local block beats it); otherwise a builder's execution value counts
 * as boost * (value / 100), saturating (the product passes every local value then). */
static void value_key(const bm_produce_block_t *b, uint64_t boost, int *tier, bm_u256_t *v)
{
    *tier = 1;
    bm_u256_t exec = b->execution;
    if (b->blinded) {
        if (boost == 0) {
            *tier = 0;
        } else if (boost != 100) {
            bm_u256_t q;
            bm_u256_div_u64(&b->execution, 100, &q, NULL);
            if (bm_u256_mul_u64(&q, boost, &exec) != 0)
                exec = (bm_u256_t){{UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX}};
        } else {
            bm_u256_div_u64(&b->execution, 100, &exec, NULL);
            bm_u256_mul_u64(&exec, 100, &exec);
        }
    }
    if (bm_u256_add(&b->consensus, &exec, v) != 0)
        *v = (bm_u256_t){{UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX}};
}

int bm_produce_value_cmp(const bm_produce_block_t *a, const bm_produce_block_t *b, uint64_t boost)
{
    int ta, tb;
    bm_u256_t va, vb;
    value_key(a, boost, &ta, &va);
    value_key(b, boost, &tb, &vb);
    if (ta != tb)
        return ta < tb ? -1 : 1;
    return bm_u256_cmp(&va, &vb);
}

uint64_t bm_produce_boost(const char *query, size_t len)
{
    char v[32];
    uint64_t boost;
    int n = bm_url_query_param(query, len, "builder_boost_factor", v, sizeof v);
    if (n <= 0 || bm_json_parse_u64(v, (size_t)n, &boost) != 0)
        return 100;
    return boost;
}

/* ---- predicates of the race ---------------------------------------------------------------- */

/* Parses an answer once for the predicates that follow on it. */
static int parsed(pctx_t *c, const bm_race_answer_t *an, bm_produce_block_t *out)
{
    if (!c->has_last || c->last_node != an->node || c->last_attempt != an->attempt ||
        c->last_body != an->body) {
        c->has_last = true;
        c->last_node = an->node;
        c->last_attempt = an->attempt;
        c->last_body = an->body;
        c->last_rc = bm_produce_parse_form(an->headers, an->body, c->form, &c->last);
        if (c->last_rc == 0 && c->last.slot != c->slot)
            c->last_rc = BM_EINVAL; /* a block for another slot is no answer */
    }
    if (c->last_rc == 0)
        *out = c->last;
    return c->last_rc;
}

static bool block_accept(const bm_race_answer_t *an, void *ud)
{
    pctx_t *c = ud;
    bm_produce_block_t b;
    if (parsed(c, an, &b) != 0)
        return false;
    bm_expected_t e;
    bm_hint_expected(c->p->hint, c->slot ? c->slot - 1 : 0, &e);
    /* the late head's parent: only from a node that holds the late head (a deliberate
     * re-org), never from one known to be behind it (a stale node builds there too) */
    bool late = e.known && e.slot_known && e.slot + 1 == c->slot &&
                bm_hint_arrived_late(c->p->hint, &e) &&
                !(an->node && bm_hint_node_behind(c->p->hint, (size_t)an->node->index));
    /* a block on the cluster head while a node's newer head (of the slot before) is being
     * resolved: not yet, the race re-asks */
    if (e.known && e.is_cluster_head && memcmp(e.root, b.parent_root, 32) == 0 &&
        bm_hint_head_moving(c->p->hint, c->slot ? c->slot - 1 : 0))
        return false;
    return bm_produce_parent_ok(&e, late, b.parent_root);
}

static bool block_usable(const bm_race_answer_t *an, void *ud)
{
    pctx_t *c = ud;
    bm_produce_block_t b;
    if (c->usable_taken || parsed(c, an, &b) != 0)
        return false;
    c->usable_taken = true;
    return true;
}

/* The online order-preserving embedding of block values into doubles. */
static double block_score(const bm_race_answer_t *an, void *ud)
{
    pctx_t *c = ud;
    bm_produce_block_t b;
    if (parsed(c, an, &b) != 0)
        return 0;
    size_t lo = 0, hi = c->n_ranks;
    while (lo < hi) { /* first rank not below b */
        size_t mid = (lo + hi) / 2;
        if (bm_produce_value_cmp(&c->ranks[mid].blk, &b, c->boost) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < c->n_ranks && bm_produce_value_cmp(&c->ranks[lo].blk, &b, c->boost) == 0)
        return c->ranks[lo].score;
    double s;
    if (c->n_ranks == 0)
        s = 0;
    else if (lo == 0)
        s = c->ranks[0].score - 1;
    else if (lo == c->n_ranks)
        s = c->ranks[c->n_ranks - 1].score + 1;
    else
        s = (c->ranks[lo - 1].score + c->ranks[lo].score) / 2;
    value_rank_t *nr = bm_grow(c->ranks, c->n_ranks, &c->cap_ranks, sizeof *nr, 8);
    if (!nr)
        return s; /* not kept: later values are placed without it, still in order */
    c->ranks = nr;
    memmove(&c->ranks[lo + 1], &c->ranks[lo], (c->n_ranks - lo) * sizeof *c->ranks);
    c->ranks[lo].blk = b;
    c->ranks[lo].score = s;
    c->n_ranks++;
    return s;
}

/* The root a record keeps (serve.h root_of): the head the block is built on. */
static int answer_root(const bm_race_answer_t *an, void *ctx, uint8_t root[32], int *index)
{
    bm_produce_block_t b;
    *index = -1;
    if (parsed(ctx, an, &b) != 0)
        return BM_EINVAL;
    memcpy(root, b.parent_root, 32);
    return 0;
}

/* ---- requests ------------------------------------------------------------------------------ */

/* What a context holds (serve.h ctx_dispose). */
static void ctx_dispose(void *ctx)
{
    pctx_t *c = ctx;
    free(c->ranks);
}

/* Counts the answer served and remembers which node produced the block. */
static void on_answer(bm_req_t *req, const bm_race_answer_t *an, void *ctx)
{
    (void)req;
    pctx_t *c = ctx;
    bm_produce_t *p = c->p;
    bm_produce_block_t b;
    bool ok2xx = !an->err && bm_status_2xx(an->status);
    if (ok2xx && an->node) {
        bool readable = parsed(c, an, &b) == 0;
        remember(p, c->slot, an->node->index, readable ? &b : NULL);
        p->stats.served++;
        if (readable && block_accept(an, c)) {
            p->stats.accepted++;
        } else {
            p->stats.fallback++;
            bm_log_limited(&p->lim, BM_LOG_WARN,
                           "produce slot %llu: no block on the expected head, serving %s's",
                           (unsigned long long)c->slot, an->node->id);
        }
        bm_log(BM_LOG_DEBUG, "produce slot %llu: block of %s after %llu ms",
               (unsigned long long)c->slot, an->node->id,
               (unsigned long long)(an->elapsed_us / 1000));
    } else {
        p->stats.failed++;
    }
}

/*
 * Why no block can be produced for `slot` at wall time `now` (the message of a 400), or
 * false: the slot is over by more than the clock disparity a validator may have
 * (BM_HEAD_DISPARITY_MS), or its start lies past what a clock can hold. Without chain
 * information nothing can be judged. Such a request never reaches the nodes: it could only
 * end a race, and the answer is known.
 */
static bool unservable(const bm_chain_info_t *chain, uint64_t slot, uint64_t now, char *why,
                       size_t cap)
{
    if (!chain || !bm_slot_clock_valid(&chain->clock))
        return false;
    const bm_slot_clock_t *c = &chain->clock;
    /* room for the next slot's start and a deadline (at most a day) after it */
    uint64_t last = (UINT64_MAX - c->genesis_ms - 2 * 86400000ull) / c->slot_ms;
    if (slot >= last) {
        snprintf(why, cap, "Invalid slot: slot %llu cannot be, its start is beyond any clock",
                 (unsigned long long)slot);
        return true;
    }
    uint64_t over = bm_slot_start_ms(c, slot + 1);
    if (now > over + BM_HEAD_DISPARITY_MS) {
        snprintf(why, cap,
                 "Invalid slot: slot %llu is over (current slot %llu): a block can no longer be "
                 "proposed for it",
                 (unsigned long long)slot, (unsigned long long)bm_slot_at(c, now));
        return true;
    }
    return false;
}

static void route(bm_req_t *req, const bm_route_params_t *params, bm_produce_form_t form,
                  bm_produce_t *p)
{
    char sv[32];
    uint64_t slot;
    int n = bm_route_param(params, "slot", sv, sizeof sv);
    if (n <= 0 || bm_json_parse_u64(sv, (size_t)n, &slot) != 0 || slot == 0) {
        bm_resp_error(req, 400, "Invalid slot: %s", n > 0 ? sv : "(none)");
        return;
    }
    size_t qlen;
    const char *query = bm_req_query(req, &qlen);
    pctx_t c = {.p = p, .slot = slot, .form = form, .boost = bm_produce_boost(query, qlen)};

    uint64_t now = bm_clock_wall_now(p->clock);
    const bm_chain_info_t *chain = bm_hint_chain(p->hint);
    char why[160];
    if (unservable(chain, slot, now, why, sizeof why)) {
        p->stats.refused++;
        bm_resp_error(req, 400, "%s", why);
        return;
    }
    uint64_t deadline =
        (chain ? bm_slot_start_ms(&chain->clock, slot) : now) + p->opts.proposal_deadline_ms;
    bm_node_t *nodes[BM_MAX_NODES];
    bm_serve_record_t rec = {
        .duty = BM_DUTY_READ_BLOCK,
        .slot = slot,
        .n_nodes = bm_pool_count(p->pool),
        .witness = p->witness ? bm_serve_witness_node(p->pool) : NULL,
        .root_of = answer_root,
        .fn = p->served_fn,
        .ud = p->served_ud,
    };
    bm_serve_t s = {
        .record = p->served_fn ? &rec : NULL,
        .policy =
            {
                .accept = block_accept,
                .usable = block_usable,
                .deadline_ms = deadline,
                .hard_timeout_ms = bm_hint_end_at(now, deadline, p->opts.max_hold_ms),
                .reask_failures = true,
                .name_failures = true,
                .repoll = BM_REPOLL_UNTIL_ACCEPTED,
                .repoll_interval_ms = p->opts.repoll_interval_ms,
                .connect_timeout_ms = p->opts.connect_timeout_ms,
            },
        .nodes = nodes,
        .n = bm_hint_candidates(p->pool, nodes, BM_MAX_NODES),
        .ctx = &c,
        .ctx_size = sizeof c,
        .ctx_dispose = ctx_dispose,
        .on_answer = on_answer,
        .shadow = p->shadow,
        .shadow_read = {BM_SHADOW_BLOCK, shadow_read_block, (uint32_t)form},
    };
    if (p->opts.selection == BM_PRODUCE_BEST_VALUE) {
        s.policy.score = block_score;
        s.policy.grace_ms = p->opts.best_value_grace_ms;
    }
    bm_serve(p->race, req, &s, NULL);
}

static void route_v3(bm_req_t *req, const bm_route_params_t *params, void *ud)
{
    route(req, params, BM_PRODUCE_FORM_V3, ud);
}

static void route_v4(bm_req_t *req, const bm_route_params_t *params, void *ud)
{
    route(req, params, BM_PRODUCE_FORM_V4, ud);
}

static void route_v2(bm_req_t *req, const bm_route_params_t *params, void *ud)
{
    route(req, params, BM_PRODUCE_FORM_V2, ud);
}

static void route_blinded_v1(bm_req_t *req, const bm_route_params_t *params, void *ud)
{
    route(req, params, BM_PRODUCE_FORM_BLINDED_V1, ud);
}

int bm_produce_register(bm_produce_t *p, bm_router_t *r)
{
    static const struct {
        const char *pattern;
        bm_route_fn fn;
    } routes[] = {
        {"/eth/v3/validator/blocks/{slot}", route_v3},
        {"/eth/v4/validator/blocks/{slot}", route_v4},
        /* removed from the spec after Electra, still asked by validator clients in service */
        {"/eth/v2/validator/blocks/{slot}", route_v2},
        {"/eth/v1/validator/blinded_blocks/{slot}", route_blinded_v1},
    };
    int rc = 0;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0] && !rc; i++)
        rc = bm_router_add(r, "GET", routes[i].pattern, routes[i].fn, p);
    return rc;
}
