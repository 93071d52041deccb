/* SPDX-License-Identifier: MIT */
/*
 * aggregate: the aggregation reads (aggregate_attestation, sync_committee_contribution)
 * raced over every usable node, best = most participants. See aggregate.h for the rules.
 *
 * How it is built: one race per distinct request (target + Accept), joined by identical
 * requests while it runs (duties/serve.h, which carries the race's context and answers
 * every waiting request). The race's policy judges each 2xx once: accept, usable, score
 * and complete are called one after the other on the same answer, so the last judgement
 * is cached per (node, attempt).
 */
#include "duties/aggregate.h"

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/clock.h"
#include "base/defaults.h"
#include "base/err.h"
#include "base/json.h"
#include "base/log.h"
#include "base/ssz.h"
#include "duties/hint.h"
#include "duties/serve.h"
#include "http/server.h"

#define KEY_MAX 1024

struct bm_aggregate {
    bm_clock_t *clock;
    bm_race_engine_t *race;
    bm_pool_t *pool;
    const bm_chain_info_t *chain;
    bm_shadow_t *shadow; /* the shadow nodes every race is mirrored to, or NULL */
    bm_aggregate_opts_t o;
    bm_aggregate_stats_t stats;
    bm_log_limit_t lim;
};

/* The context of one race, shared by its coalesced waiters. */
typedef struct agg_race {
    bm_aggregate_t *m;
    bm_aggregate_kind_t kind;
    char fork[16]; /* the requested slot's fork, for SSZ answers without a version header */
    /* the last answer counted: by who gave it (the node, its attempt, the body) */
    const bm_node_t *c_node;
    unsigned c_attempt;
    const bm_buf_t *c_body;
    bool c_valid, c_ok;
    size_t c_set, c_len;
} agg_race_t;

void bm_aggregate_opts_default(bm_aggregate_opts_t *o)
{
    memset(o, 0, sizeof *o);
    for (int k = 0; k < BM_AGGREGATE_KINDS; k++) {
        o->hold_floor_ms[k] = BM_DEFAULT_DUTIES_HOLD_FLOOR_MS;
        o->max_hold_ms[k] = BM_DEFAULT_DUTIES_MAX_HOLD_MS;
    }
    o->grace_ms = BM_DEFAULT_DUTIES_AGGREGATE_GRACE_MS;
    o->connect_timeout_ms = BM_DEFAULT_TIMEOUTS_CONNECT_MS;
}

/* ---- counting bits ------------------------------------------------------------------------ */

int bm_aggregate_count_bits(bm_aggregate_kind_t kind, const char *content_type, const char *fork,
                            const void *body, size_t len, size_t *set, size_t *total)
{
    if (!body || !set || !total || kind >= BM_AGGREGATE_KINDS)
        return BM_EINVAL;
    if (bm_content_type_is_ssz(content_type)) {
        if (kind == BM_AGGREGATE_ATTESTATION) {
            bm_ssz_attestation_info_t ai;
            if (!fork || bm_ssz_attestation_info(body, len, fork, &ai) != 0)
                return BM_EINVAL;
            *set = ai.bits_set;
            *total = ai.bits_len;
            return 0;
        }
        bm_ssz_sync_contribution_t sc;
        if (bm_ssz_sync_contribution(body, len, &sc) != 0)
            return BM_EINVAL;
        *set = sc.bits_set;
        *total = 128;
        return 0;
    }
    struct json_object *doc = NULL;
    if (bm_json_parse(body, len, 0, &doc, NULL) != 0)
        return BM_EINVAL;
    int rc = BM_EINVAL;
    const char *hex = bm_json_get_str(doc, "/data/aggregation_bits");
    if (hex) {
        size_t n = 0, l = 0;
        if (kind == BM_AGGREGATE_ATTESTATION) {
            rc = bm_json_hex_bitlist_bits_set(hex, &n, &l);
        } else {
            rc = bm_json_hex_bits_set(hex, &n);
            l = (strlen(hex) - 2) * 4; /* validated: "0x" + an even number of digits */
        }
        if (rc == 0) {
            *set = n;
            *total = l;
        }
    }
    json_object_put(doc);
    return rc;
}

/* Counts the bits of answer `a` once: the predicates look at each answer in a row, and
 * every request waiting on the race (the aggregators of one committee) at the one it
 * serves. True when it was counted now, false when remembered. */
static bool count_once(agg_race_t *ar, const bm_race_answer_t *a)
{
    if (ar->c_valid && ar->c_node == a->node && ar->c_attempt == a->attempt &&
        ar->c_body == a->body)
        return false;
    ar->c_valid = true;
    ar->c_node = a->node;
    ar->c_attempt = a->attempt;
    ar->c_body = a->body;
    ar->c_set = ar->c_len = 0;
    const char *fork = bm_hdrs_get(a->headers, "eth-consensus-version");
    if (!fork || !*fork)
        fork = ar->fork[0] ? ar->fork : NULL;
    ar->c_ok = a->body &&
               bm_aggregate_count_bits(ar->kind, bm_hdrs_get(a->headers, "content-type"), fork,
                                       a->body->data, a->body->len, &ar->c_set, &ar->c_len) == 0;
    return true;
}

/* Judges answer `a`: counted once, and an answer that cannot be served counted as ignored. */
static void judge(agg_race_t *ar, const bm_race_answer_t *a)
{
    if (count_once(ar, a) && (!ar->c_ok || ar->c_set == 0)) {
        ar->m->stats.ignored++;
        bm_log_limited(&ar->m->lim, BM_LOG_DEBUG, "aggregate: %s answered %s, ignored",
                       a->node ? a->node->id : "?",
                       ar->c_ok ? "an aggregate with no bit set" : "an unreadable body");
    }
}

static bool p_accept(const bm_race_answer_t *a, void *ud)
{
    agg_race_t *ar = ud;
    judge(ar, a);
    return ar->c_ok && ar->c_set > 0;
}

static double p_score(const bm_race_answer_t *a, void *ud)
{
    agg_race_t *ar = ud;
    judge(ar, a);
    return ar->c_ok ? (double)ar->c_set : 0;
}

static bool p_complete(const bm_race_answer_t *a, void *ud)
{
    agg_race_t *ar = ud;
    judge(ar, a);
    return ar->c_ok && ar->c_set > 0 && ar->c_set == ar->c_len;
}

/* ---- the request --------------------------------------------------------------------------- */

/* The slot's aggregate (contribution) due time; 0 (counts as past) without a known chain or
 * slot. */
static uint64_t due_of(const bm_aggregate_t *m, bm_aggregate_kind_t kind, bool has_slot,
                       uint64_t slot)
{
    if (!has_slot || !m->chain || !m->chain->known)
        return 0;
    return bm_chain_due_ms(
        m->chain, slot, kind == BM_AGGREGATE_ATTESTATION ? BM_DUE_AGGREGATE : BM_DUE_CONTRIBUTION);
}

/* Counts the answer served. */
static void on_answer(bm_req_t *req, const bm_race_answer_t *a, void *ctx)
{
    agg_race_t *ar = ctx;
    bm_aggregate_t *m = ar->m;
    size_t set = 0, total = 0;
    bool ok = false;
    if (bm_status_2xx(a->status) && a->body) {
        count_once(ar, a);
        set = ar->c_set;
        total = ar->c_len;
        ok = ar->c_ok && set > 0;
    }
    if (ok && set == total)
        m->stats.full++;
    else if (ok)
        m->stats.partial++;
    else
        m->stats.errors++;
    bm_log(BM_LOG_DEBUG, "aggregate %s: %d from %s, %zu of %zu bits, after %llu ms",
           bm_req_target(req), a->status, a->node ? a->node->id : "-", set, total,
           (unsigned long long)(a->elapsed_us / 1000));
}

static void handle(bm_aggregate_t *m, bm_req_t *req, bm_aggregate_kind_t kind)
{
    m->stats.requests[kind]++;
    agg_race_t ar = {.m = m, .kind = kind};
    char sv[32];
    int sn = bm_req_query_param(req, "slot", sv, sizeof sv);
    uint64_t slot = 0;
    bool has_slot = sn >= 0 && bm_json_parse_u64(sv, (size_t)sn, &slot) == 0;
    if (has_slot && m->chain && m->chain->known)
        snprintf(ar.fork, sizeof ar.fork, "%s",
                 bm_fork_name(bm_chain_fork_at_slot(m->chain, slot)));

    /* identical requests (the aggregators of one committee) share one race */
    const char *accept = bm_req_header(req, "accept");
    char key[KEY_MAX];
    int kl =
        snprintf(key, sizeof key, "aggregate %s\n%s", bm_req_target(req), accept ? accept : "");
    /* the hint's deadline (min(max(now + holdFloor, due), now + maxHold)) and end
     * (max(now + maxHold, due)): docs/duties.md */
    uint64_t now = bm_clock_wall_now(m->clock), due = due_of(m, kind, has_slot, slot);
    uint64_t deadline =
        bm_hint_deadline_at(now, due, m->o.hold_floor_ms[kind], m->o.max_hold_ms[kind]);
    uint64_t end = bm_hint_end_at(now, due, m->o.max_hold_ms[kind]);
    bm_node_t *cand[BM_MAX_NODES];
    bm_serve_t s = {
        .policy =
            {
                .accept = p_accept,
                .usable = p_accept, /* an answer with no bit set is no fallback either */
                .score = p_score,
                .complete = p_complete,
                .grace_ms = m->o.grace_ms,
                .deadline_ms = deadline,
                .hard_timeout_ms = end,
                .reask_failures = true,
                .name_failures = true,
                .connect_timeout_ms = m->o.connect_timeout_ms,
            },
        .key = kl > 0 && (size_t)kl < sizeof key ? key : NULL,
        .nodes = cand,
        .n = bm_pool_candidates(m->pool, BM_POOL_PREFER_ANSWERING, true, cand, BM_MAX_NODES),
        .ctx = &ar,
        .ctx_size = sizeof ar,
        .on_answer = on_answer,
        /* scored on answers, errors and latency: every node's aggregate of the same data
         * differs in its bits, and nothing in it is about a block to compare */
        .shadow = m->shadow,
        .shadow_read = {kind == BM_AGGREGATE_CONTRIBUTION ? BM_SHADOW_CONTRIBUTION
                                                          : BM_SHADOW_AGGREGATE,
                        NULL, 0},
    };
    bool joined;
    if (bm_serve(m->race, req, &s, &joined) && !joined)
        m->stats.races++;
}

static void route_attestation(bm_req_t *req, const bm_route_params_t *params, void *ud)
{
    (void)params;
    handle(ud, req, BM_AGGREGATE_ATTESTATION);
}

static void route_contribution(bm_req_t *req, const bm_route_params_t *params, void *ud)
{
    (void)params;
    handle(ud, req, BM_AGGREGATE_CONTRIBUTION);
}

/* ---- lifetime ---------------------------------------------------------------------------- */

bm_aggregate_t *bm_aggregate_new(bm_clock_t *clock, bm_race_engine_t *race, bm_pool_t *pool,
                                 const bm_chain_info_t *chain, const bm_aggregate_opts_t *o)
{
    if (!clock || !race || !pool || !chain)
        return NULL;
    bm_aggregate_t *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->clock = clock;
    m->race = race;
    m->pool = pool;
    m->chain = chain;
    if (o)
        m->o = *o;
    else
        bm_aggregate_opts_default(&m->o);
    for (int k = 0; k < BM_AGGREGATE_KINDS; k++)
        if (!m->o.max_hold_ms[k] || m->o.max_hold_ms[k] < m->o.hold_floor_ms[k])
            m->o.max_hold_ms[k] = m->o.hold_floor_ms[k];
    return m;
}

void bm_aggregate_set_shadow(bm_aggregate_t *m, bm_shadow_t *shadow)
{
    m->shadow = shadow;
}

void bm_aggregate_free(bm_aggregate_t *m)
{
    free(m);
}

int bm_aggregate_register(bm_aggregate_t *m, bm_router_t *r)
{
    if (!m || !r)
        return BM_EINVAL;
    int rc =
        bm_router_add(r, "GET", "/eth/v2/validator/aggregate_attestation", route_attestation, m);
    if (!rc)
        rc = bm_router_add(r, "GET", "/eth/v1/validator/aggregate_attestation", route_attestation,
                           m);
    if (!rc)
        rc = bm_router_add(r, "GET", "/eth/v1/validator/sync_committee_contribution",
                           route_contribution, m);
    return rc;
}

const bm_aggregate_stats_t *bm_aggregate_stats(const bm_aggregate_t *m)
{
    return &m->stats;
}
