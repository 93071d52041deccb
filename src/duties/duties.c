/* SPDX-License-Identifier: MIT */
/*
 * duties: attester, proposer (v1, v2), sync and ptc duties raced over the ready nodes and
 * accepted by dependent root; liveness asked of every node and OR-ed. See duties.h for
 * the rules and docs/duties-reads.md for why.
 *
 * How a duty read runs: one race per request (duty bodies differ per validator client,
 * so nothing is coalesced). The policy's accept predicate reads the answer's
 * dependent_root (each answer is parsed once; the result is kept per candidate node and
 * attempt) and compares it with the cluster chain's root at the dependent slot, read from
 * the head tracker at that moment, so a head that moves during the race is followed. A
 * node that named another root is re-asked (until-accepted) because it may only be a
 * block behind; a node that failed (5xx, network) is asked again until the bound, since it
 * may recover. A chain of policy timers (bm_race_at) runs every CHECK_MS: when every node
 * has failed and one said the request is wrong (a 4xx) it relays that at once instead of
 * waiting, and at the majority time it decides by majority among the 2xx answers in hand
 * (bm_race_answers + bm_race_decide); with none in hand, the first 2xx to come is accepted
 * from then on. With nothing at the bound (majority time + tail), a 503 names each node's
 * failure.
 * The completion compares every node's answer for the disagreement counter. The race
 * carries the request's context and answers it (duties/serve.h).
 *
 * Liveness is a race served from every node's answer, with an accept predicate that
 * accepts nothing: it ends when every node answered (or at its bound), and the answer is
 * built from all of them: the OR, and the ready-through-the-epoch rule.
 */
#include "duties/duties.h"

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/defaults.h"
#include "base/err.h"
#include "base/json.h"
#include "base/log.h"
#include "duties/serve.h"
#include "http/server.h"

#define CHECK_MS 50 /* how often a duty race looks at what it has before the majority time */
#define MAX_INDICES 1000000

/* Why a duty answer was accepted. */
enum { ACC_NONE = 0, ACC_ROOT, ACC_FIRST, ACC_LATE };

struct bm_duties {
    bm_clock_t *clock;
    bm_race_engine_t *race;
    bm_pool_t *pool;
    const bm_chain_info_t *chain;
    const bm_head_t *head;
    bm_shadow_t *shadow; /* the shadow nodes every race is mirrored to, or NULL */
    bm_duties_opts_t o;
    bm_duties_stats_t stats;
    uint64_t *ready_since; /* per node index; 0: not ready */
    size_t n_ready;
    bm_log_limit_t lim_mismatch, lim_disagree;
};

/* What a node's latest 2xx said. */
typedef struct seen {
    const bm_node_t *node;
    unsigned attempt;
    bool judged;
    bool ok; /* a readable duties answer */
    bool optimistic;
    bool mismatch_counted;
    uint8_t root[32];  /* dependent_root (not for sync duties) */
    uint64_t hash;     /* sync duties: canonical hash of `data` */
    uint64_t since_ms; /* arrival of this node's first answer saying the same (re-asks
                          repeat it: ties go to who said it first, not to who was re-asked
                          last) */
} seen_t;

/* The context of one duty race. */
typedef struct duty {
    bm_duties_t *d;
    bm_duty_kind_t kind;
    uint64_t epoch;
    uint64_t majority_at, next_check;
    bool majority_ran; /* from then on the first readable 2xx is accepted */
    bool by_majority;  /* the answer was decided by the majority rule */
    int accepted_as;   /* why the last accepted answer was accepted (ACC_*) */
    size_t n;
    seen_t seen[BM_MAX_NODES];
} duty_t;

/* The context of one liveness race. */
typedef struct live {
    bm_duties_t *d;
    uint64_t epoch;
    uint64_t *indices;
    size_t n_indices;
} live_t;

static const char *const kind_names[BM_DUTY_KINDS] = {"attester", "proposer v1", "proposer v2",
                                                      "sync", "ptc"};

void bm_duties_opts_default(bm_duties_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->majority_after_ms = BM_DEFAULT_DUTIES_MAJORITY_AFTER_MS;
    o->repoll_ms = 250;
    o->tail_ms = 500;
    o->liveness_timeout_ms = 1500;
    o->connect_timeout_ms = BM_DEFAULT_TIMEOUTS_CONNECT_MS;
}

/* ---- dependent roots ------------------------------------------------------------------------ */

bool bm_duties_dependent_slot(bm_duty_kind_t kind, uint64_t epoch, uint32_t slots_per_epoch,
                              uint64_t *slot)
{
    if (kind == BM_DUTY_SYNC || kind >= BM_DUTY_KINDS || slots_per_epoch == 0 || !slot)
        return false;
    /* the epoch whose start minus one is the dependent slot: E-1, or E for proposer v1 */
    uint64_t e = epoch;
    if (kind != BM_DUTY_PROPOSER_V1) {
        if (e == 0) {
            *slot = 0; /* underflow: the genesis block */
            return true;
        }
        e--;
    }
    if (e > UINT64_MAX / slots_per_epoch)
        return false;
    uint64_t start = e * slots_per_epoch;
    *slot = start == 0 ? 0 : start - 1;
    return true;
}

int bm_duties_expected_root(const bm_head_t *head, const bm_chain_info_t *chain,
                            bm_duty_kind_t kind, uint64_t epoch, uint8_t out[32])
{
    uint64_t slot;
    if (!chain || !bm_slot_clock_valid(&chain->clock) ||
        !bm_duties_dependent_slot(kind, epoch, chain->clock.slots_per_epoch, &slot))
        return BM_EINVAL;
    if (!head)
        return BM_EUNAVAIL;
    return bm_head_root_at_slot(head, slot, out);
}

/* ---- ready since ----------------------------------------------------------------------------- */

static uint64_t *ready_cell(bm_duties_t *d, int index)
{
    if (index < 0)
        return NULL;
    size_t i = (size_t)index;
    if (i >= d->n_ready) {
        size_t n = i + 8;
        uint64_t *p = realloc(d->ready_since, n * sizeof *p);
        if (!p)
            return NULL;
        memset(p + d->n_ready, 0, (n - d->n_ready) * sizeof *p);
        d->ready_since = p;
        d->n_ready = n;
    }
    return &d->ready_since[i];
}

static void on_state(bm_node_t *node, bm_node_state_t old, void *ud)
{
    bm_duties_t *d = ud;
    uint64_t *cell = ready_cell(d, node->index);
    if (!cell)
        return;
    if (node->state != BM_NODE_READY)
        *cell = 0;
    else if (old != BM_NODE_READY || *cell == 0)
        *cell = bm_clock_wall_now(d->clock);
}

uint64_t bm_duties_ready_since(const bm_duties_t *d, const bm_node_t *node)
{
    if (!d || !node || node->index < 0 || (size_t)node->index >= d->n_ready ||
        node->state != BM_NODE_READY)
        return 0;
    return d->ready_since[node->index];
}

/* ---- judging duty answers ------------------------------------------------------------------- */

/* Parses a duties answer into `s`. */
static void parse_answer(bm_duty_kind_t kind, const bm_buf_t *body, seen_t *s)
{
    s->ok = false;
    struct json_object *doc = NULL;
    if (!body || bm_json_parse(body->data, body->len, 0, &doc, NULL) != 0)
        return;
    struct json_object *data = bm_json_get(doc, "/data");
    bool opt = false;
    int orc = bm_json_get_bool(doc, "/execution_optimistic", &opt);
    if (data && json_object_is_type(data, json_type_array) && orc != BM_EINVAL) {
        s->optimistic = orc == 0 && opt;
        if (kind == BM_DUTY_SYNC)
            s->ok = bm_json_canonical_hash(data, NULL, &s->hash) == 0;
        else
            s->ok = bm_json_get_root(doc, "/dependent_root", s->root) == 0;
    }
    json_object_put(doc);
}

/* A shadow node's duties are about their dependent root (sync duties: about none); `arg`
 * is the kind (duties/shadow.h). */
static bool shadow_read_duties(const bm_hdrs_t *h, const bm_buf_t *body, uint32_t arg,
                               bm_shadow_view_t *out)
{
    seen_t s = {0};
    (void)h;
    parse_answer((bm_duty_kind_t)arg, body, &s);
    if (!s.ok)
        return false;
    out->has_root = arg != BM_DUTY_SYNC;
    memcpy(out->root, s.root, 32);
    return true;
}

static seen_t *seen_of(duty_t *q, const bm_node_t *node)
{
    for (size_t i = 0; i < q->n; i++)
        if (q->seen[i].node == node)
            return &q->seen[i];
    return NULL;
}

static bool same_group(const duty_t *q, const seen_t *a, const seen_t *b)
{
    return q->kind == BM_DUTY_SYNC ? a->hash == b->hash : memcmp(a->root, b->root, 32) == 0;
}

/* The judgement of answer `a` (a 2xx), parsed once per node and attempt. */
static seen_t *judge(duty_t *q, const bm_race_answer_t *a)
{
    seen_t *s = seen_of(q, a->node);
    if (!s)
        return NULL;
    if (!s->judged || s->attempt != a->attempt) {
        seen_t before = *s;
        s->judged = true;
        s->attempt = a->attempt;
        s->mismatch_counted = false;
        parse_answer(q->kind, a->body, s);
        if (!before.judged || !before.ok || !s->ok || !same_group(q, &before, s))
            s->since_ms = a->arrived_ms;
    }
    return s;
}

static bool p_accept(const bm_race_answer_t *a, void *ud)
{
    duty_t *q = ud;
    seen_t *s = judge(q, a);
    if (!s || !s->ok)
        return false;
    if (q->majority_ran) {
        q->accepted_as = ACC_LATE; /* past the majority time with nothing in hand */
        return true;
    }
    if (s->optimistic)
        return false;
    uint8_t want[32];
    if (q->kind == BM_DUTY_SYNC ||
        bm_duties_expected_root(q->d->head, q->d->chain, q->kind, q->epoch, want) != 0) {
        q->accepted_as = ACC_FIRST; /* no known root: the first 2xx */
        return true;
    }
    if (memcmp(want, s->root, 32) == 0) {
        q->accepted_as = ACC_ROOT;
        return true;
    }
    if (!s->mismatch_counted) {
        s->mismatch_counted = true;
        q->d->stats.mismatches++;
        char got[BM_ROOT_HEX_LEN + 1], exp[BM_ROOT_HEX_LEN + 1];
        bm_root_to_hex(s->root, got);
        bm_root_to_hex(want, exp);
        bm_log_limited(&q->d->lim_mismatch, BM_LOG_INFO,
                       "duties %s epoch %llu: %s answered dependent_root %s, the cluster chain "
                       "has %s",
                       kind_names[q->kind], (unsigned long long)q->epoch, a->node->id, got, exp);
    }
    return false;
}

static bool p_usable(const bm_race_answer_t *a, void *ud)
{
    seen_t *s = judge(ud, a);
    return s && s->ok;
}

/* Rank of a failed answer for relaying: lower is more specific (as the engine ranks). */
static int error_rank(int status)
{
    if (status >= 400 && status <= 499)
        return 0;
    if (status >= 500)
        return 2;
    return 1;
}

/* The majority among the readable 2xx answers in hand (non-optimistic ones first); ties
 * go to the group that said it first, and the group's first sayer's answer is sent. */
static void decide_majority(duty_t *q, bm_race_t *r, const bm_race_answer_t *as, size_t n)
{
    for (int pass = 0; pass < 2; pass++) {
        const bm_race_answer_t *best = NULL;
        uint64_t best_since = 0;
        size_t best_count = 0;
        for (size_t i = 0; i < n; i++) {
            if (as[i].err || !bm_status_2xx(as[i].status))
                continue;
            seen_t *si = judge(q, &as[i]);
            if (!si || !si->ok || (pass == 0 && si->optimistic))
                continue;
            size_t count = 0;
            const bm_race_answer_t *first = NULL;
            uint64_t since = UINT64_MAX;
            for (size_t j = 0; j < n; j++) {
                if (as[j].err || !bm_status_2xx(as[j].status))
                    continue;
                seen_t *sj = judge(q, &as[j]);
                if (!sj || !sj->ok || (pass == 0 && sj->optimistic) || !same_group(q, si, sj))
                    continue;
                count++;
                if (!first || sj->since_ms < since) {
                    first = &as[j];
                    since = sj->since_ms;
                }
            }
            if (first && (count > best_count || (count == best_count && since < best_since))) {
                best_count = count;
                best = first;
                best_since = since;
            }
        }
        if (best) {
            q->by_majority = true;
            if (bm_race_decide(r, best) != 0)
                q->by_majority = false;
            return;
        }
    }
}

/* The policy timer: every CHECK_MS until the majority time, then the majority rule. */
static void on_check(bm_race_t *r, void *ud)
{
    duty_t *q = ud;
    size_t n = 0;
    const bm_race_answer_t *as = bm_race_answers(r, &n);
    bool any_2xx = false;
    const bm_race_answer_t *err = NULL;
    for (size_t i = 0; i < n; i++) {
        if (as[i].err)
            continue;
        if (bm_status_2xx(as[i].status))
            any_2xx = true;
        else if (!err || error_rank(as[i].status) < error_rank(err->status))
            err = &as[i];
    }
    if (n == q->n && !any_2xx && err && error_rank(err->status) == 0) {
        /* every node failed and one said the request itself is wrong (a 4xx): that is the
         * answer at once. A 5xx or a network error is asked again (reask_failures) until
         * the bound: the node may recover */
        bm_race_decide(r, err);
        return;
    }
    if (q->next_check >= q->majority_at) {
        q->majority_ran = true;
        decide_majority(q, r, as, n);
        return;
    }
    q->next_check =
        q->next_check + CHECK_MS < q->majority_at ? q->next_check + CHECK_MS : q->majority_at;
    if (bm_race_at(r, q->next_check, on_check, q) != 0)
        q->majority_ran = true; /* no timer: let the first 2xx through */
}

/* ---- duty requests --------------------------------------------------------------------------- */

/* Every node's answer: counts a disagreement among them. */
static void on_duty_complete(const bm_race_answer_t *answers, size_t n, void *ctx)
{
    duty_t *q = ctx;
    (void)answers;
    (void)n;
    const seen_t *ref = NULL;
    bool disagree = false;
    for (size_t i = 0; i < q->n; i++) {
        const seen_t *s = &q->seen[i];
        if (!s->judged || !s->ok)
            continue;
        if (!ref)
            ref = s;
        else if (!same_group(q, ref, s))
            disagree = true;
    }
    if (disagree) {
        q->d->stats.disagreements++;
        if (bm_log_enabled(BM_LOG_WARN)) {
            bm_str_t m = BM_STR_INIT;
            for (size_t i = 0; i < q->n; i++) {
                const seen_t *s = &q->seen[i];
                if (!s->judged || !s->ok)
                    continue;
                if (q->kind == BM_DUTY_SYNC) {
                    bm_str_printf(&m, " %s=%016llx", s->node->id, (unsigned long long)s->hash);
                } else {
                    char hex[BM_ROOT_HEX_LEN + 1];
                    bm_root_to_hex(s->root, hex);
                    bm_str_printf(&m, " %s=%s", s->node->id, hex);
                }
            }
            bm_log_limited(&q->d->lim_disagree, BM_LOG_WARN,
                           "duties %s epoch %llu: nodes disagree (%s):%s", kind_names[q->kind],
                           (unsigned long long)q->epoch,
                           q->kind == BM_DUTY_SYNC ? "data" : "dependent_root", bm_str_data(&m));
            bm_str_dispose(&m);
        }
    }
}

/* Counts how the answer served was chosen. */
static void on_duty_answer(bm_req_t *req, const bm_race_answer_t *a, void *ctx)
{
    duty_t *q = ctx;
    (void)req;
    bm_duties_stats_t *st = &q->d->stats;
    const seen_t *s = !a->err && bm_status_2xx(a->status) ? seen_of(q, a->node) : NULL;
    const char *how;
    if (!s || !s->judged || !s->ok) {
        st->errors++;
        how = "error";
    } else if (q->by_majority) {
        st->majority++;
        how = "majority";
    } else if (q->accepted_as == ACC_ROOT) {
        st->by_root++;
        how = "dependent root";
    } else if (q->accepted_as == ACC_FIRST) {
        st->first++;
        how = "first";
    } else {
        st->late++; /* after the majority time, or the best usable at the hard timeout */
        how = "late";
    }
    bm_log(BM_LOG_DEBUG, "duties %s epoch %llu: %d from %s (%s) after %llu ms", kind_names[q->kind],
           (unsigned long long)q->epoch, a->status, a->node ? a->node->id : "-", how,
           (unsigned long long)(a->elapsed_us / 1000));
}

/* The {epoch} parameter, or a 400 answered. */
static bool epoch_param(bm_req_t *req, const bm_route_params_t *params, uint64_t *epoch)
{
    char v[32];
    int len = bm_route_param(params, "epoch", v, sizeof v);
    if (len <= 0 || bm_json_parse_u64(v, (size_t)len, epoch) != 0) {
        bm_resp_error(req, 400, "Invalid epoch: %s", len > 0 ? v : "(missing)");
        return false;
    }
    return true;
}

static void handle_duty(bm_duties_t *d, bm_req_t *req, const bm_route_params_t *params,
                        bm_duty_kind_t kind)
{
    d->stats.requests[kind]++;
    uint64_t epoch;
    if (!epoch_param(req, params, &epoch))
        return;
    duty_t q = {.d = d, .kind = kind, .epoch = epoch};
    bm_node_t *cand[BM_MAX_NODES];
    q.n = bm_pool_candidates(d->pool, BM_POOL_PREFER_READY, true, cand, BM_MAX_NODES);
    for (size_t i = 0; i < q.n; i++)
        q.seen[i].node = cand[i];
    uint64_t now = bm_clock_wall_now(d->clock);
    q.majority_at = now + d->o.majority_after_ms;
    q.next_check = now + CHECK_MS < q.majority_at ? now + CHECK_MS : q.majority_at;
    bm_serve_t s = {
        .policy =
            {
                .accept = p_accept,
                .usable = p_usable,
                .hard_timeout_ms = q.majority_at + d->o.tail_ms,
                .reask_failures = true,
                .name_failures = true,
                .repoll = BM_REPOLL_UNTIL_ACCEPTED,
                .repoll_interval_ms = d->o.repoll_ms,
                .connect_timeout_ms = d->o.connect_timeout_ms,
            },
        .nodes = cand,
        .n = q.n,
        .forward_body = true,
        .ctx = &q,
        .ctx_size = sizeof q,
        .on_answer = on_duty_answer,
        .on_complete = on_duty_complete,
        .shadow = d->shadow,
        .shadow_read = {BM_SHADOW_DUTIES, shadow_read_duties, (uint32_t)kind},
    };
    bm_race_t *r = bm_serve(d->race, req, &s, NULL);
    if (!r)
        return;
    duty_t *rq = bm_race_ctx(r);
    if (rq->n == 0 || bm_race_at(r, rq->next_check, on_check, rq) != 0)
        rq->majority_ran = true;
}

static void route_attester(bm_req_t *req, const bm_route_params_t *p, void *ud)
{
    handle_duty(ud, req, p, BM_DUTY_ATTESTER);
}

static void route_proposer_v1(bm_req_t *req, const bm_route_params_t *p, void *ud)
{
    handle_duty(ud, req, p, BM_DUTY_PROPOSER_V1);
}

static void route_proposer_v2(bm_req_t *req, const bm_route_params_t *p, void *ud)
{
    handle_duty(ud, req, p, BM_DUTY_PROPOSER_V2);
}

static void route_sync(bm_req_t *req, const bm_route_params_t *p, void *ud)
{
    handle_duty(ud, req, p, BM_DUTY_SYNC);
}

static void route_ptc(bm_req_t *req, const bm_route_params_t *p, void *ud)
{
    handle_duty(ud, req, p, BM_DUTY_PTC);
}

/* ---- liveness ------------------------------------------------------------------------------ */

/* A JSON index: a quoted decimal (the spec) or a plain integer. */
static bool index_value(struct json_object *v, uint64_t *out)
{
    if (json_object_is_type(v, json_type_string))
        return bm_json_parse_u64(json_object_get_string(v), (size_t)json_object_get_string_len(v),
                                 out) == 0;
    if (json_object_is_type(v, json_type_int)) {
        if (json_object_get_int64(v) < 0)
            return false;
        *out = json_object_get_uint64(v);
        return true;
    }
    return false;
}

typedef struct live_entry {
    uint64_t index;
    bool live;
} live_entry_t;

static int cmp_entry(const void *a, const void *b)
{
    uint64_t x = ((const live_entry_t *)a)->index, y = ((const live_entry_t *)b)->index;
    return x < y ? -1 : x > y;
}

static live_entry_t *find_entry(live_entry_t *e, size_t n, uint64_t index)
{
    live_entry_t key = {index, false};
    return bsearch(&key, e, n, sizeof *e, cmp_entry);
}

int bm_duties_liveness_merge(const uint64_t *indices, size_t n_indices, bm_buf_t *const *answers,
                             size_t n, bool *valid, bm_str_t *out)
{
    /* the requested indices, sorted and unique, each with its OR */
    live_entry_t *e = calloc(n_indices ? n_indices : 1, sizeof *e);
    if (!e)
        return BM_ENOMEM;
    for (size_t i = 0; i < n_indices; i++)
        e[i].index = indices[i];
    qsort(e, n_indices, sizeof *e, cmp_entry);
    size_t ne = 0;
    for (size_t i = 0; i < n_indices; i++)
        if (ne == 0 || e[ne - 1].index != e[i].index)
            e[ne++] = e[i];
    int readable = 0;
    for (size_t k = 0; k < n; k++) {
        bool ok = false;
        struct json_object *doc = NULL;
        if (answers[k] && bm_json_parse(answers[k]->data, answers[k]->len, 0, &doc, NULL) == 0) {
            struct json_object *data = bm_json_get(doc, "/data");
            ok = data && json_object_is_type(data, json_type_array);
            size_t len = ok ? json_object_array_length(data) : 0;
            /* first check the whole answer, then take it: a half-readable answer counts
             * for nothing */
            for (size_t i = 0; i < len && ok; i++) {
                struct json_object *it = json_object_array_get_idx(data, i);
                uint64_t idx;
                bool lv;
                ok = json_object_is_type(it, json_type_object) &&
                     index_value(json_object_object_get(it, "index"), &idx) &&
                     bm_json_get_bool(it, "/is_live", &lv) == 0;
            }
            for (size_t i = 0; i < len && ok; i++) {
                struct json_object *it = json_object_array_get_idx(data, i);
                uint64_t idx = 0;
                bool lv = false;
                index_value(json_object_object_get(it, "index"), &idx);
                bm_json_get_bool(it, "/is_live", &lv);
                live_entry_t *en = find_entry(e, ne, idx);
                if (en && lv)
                    en->live = true;
            }
            json_object_put(doc);
        }
        if (valid)
            valid[k] = ok;
        readable += ok;
    }
    bm_str_puts(out, "{\"data\":[");
    for (size_t i = 0; i < n_indices; i++) {
        const live_entry_t *en = find_entry(e, ne, indices[i]);
        bm_str_printf(out, "%s{\"index\":\"%llu\",\"is_live\":%s}", i ? "," : "",
                      (unsigned long long)indices[i], en && en->live ? "true" : "false");
    }
    bm_str_puts(out, "]}");
    free(e);
    return out->oom ? BM_ENOMEM : readable;
}

/* What a liveness context holds (serve.h ctx_dispose). */
static void live_dispose(void *ctx)
{
    live_t *q = ctx;
    free(q->indices);
}

/* Wall time at which `epoch` starts; UINT64_MAX when it is too far to compute. */
static uint64_t epoch_start_ms(const bm_slot_clock_t *c, uint64_t epoch)
{
    if (epoch > UINT64_MAX / c->slots_per_epoch)
        return UINT64_MAX;
    uint64_t slot = epoch * c->slots_per_epoch;
    if (slot > (UINT64_MAX - c->genesis_ms) / c->slot_ms)
        return UINT64_MAX;
    return c->genesis_ms + slot * c->slot_ms;
}

/* Answers a liveness request from every node's answer. */
static void on_live_respond(bm_req_t *req, const bm_race_answer_t *as, size_t n, void *ctx)
{
    live_t *q = ctx;
    bm_duties_t *d = q->d;
    bm_buf_t *bodies[BM_MAX_NODES];
    bool valid[BM_MAX_NODES];
    const bm_race_answer_t *err = NULL;
    size_t nb = 0;
    for (size_t i = 0; i < n && i < BM_MAX_NODES; i++) {
        bodies[i] = NULL;
        valid[i] = false;
        if (as[i].err)
            continue;
        if (bm_status_2xx(as[i].status)) {
            bodies[i] = as[i].body;
            nb++;
        } else if (!err || error_rank(as[i].status) < error_rank(err->status)) {
            err = &as[i];
        }
    }
    if (nb == 0) {
        /* a 4xx (the request is wrong) as it is; otherwise a 503 naming each node's failure,
         * as every duty read answers (a node's 5xx would hide what the others did) */
        d->stats.errors++;
        if (err && error_rank(err->status) == 0) {
            bm_serve_reply(req, err);
        } else {
            bm_str_t m = BM_STR_INIT;
            for (size_t i = 0; i < n; i++) {
                bm_str_printf(&m, "%s%s: ", i ? "; " : "", as[i].node->id);
                bm_race_describe(&m, &as[i]);
            }
            bm_resp_error(req, 503, "%s%s", err ? "no usable answer: " : "no upstream answered: ",
                          n ? bm_str_data(&m) : "no upstream available");
            bm_str_dispose(&m);
        }
        return;
    }
    bm_str_t out = BM_STR_INIT;
    size_t nn = n < BM_MAX_NODES ? n : BM_MAX_NODES;
    int readable = bm_duties_liveness_merge(q->indices, q->n_indices, bodies, nn, valid, &out);
    /* the answer counts only when a node that answered was ready through the whole epoch */
    const bm_chain_info_t *c = d->chain;
    uint64_t start = c && bm_slot_clock_valid(&c->clock) ? epoch_start_ms(&c->clock, q->epoch) : 0;
    const bm_node_t *vouch = NULL;
    for (size_t i = 0; i < nn && start && !vouch; i++) {
        if (!bodies[i] || !valid[i])
            continue;
        uint64_t since = bm_duties_ready_since(d, as[i].node);
        if (since && since <= start)
            vouch = as[i].node;
    }
    if (readable < 0) {
        d->stats.errors++;
        bm_resp_error(req, 500, "out of memory");
    } else if (readable == 0) {
        d->stats.errors++;
        bm_resp_error(req, 502, "no readable liveness answer from %zu node(s)", nb);
    } else if (!vouch) {
        d->stats.liveness_unavailable++;
        bm_log(BM_LOG_INFO,
               "liveness epoch %llu: 503, no node that answered has been ready since the "
               "epoch started",
               (unsigned long long)q->epoch);
        bm_resp_error(req, 503,
                      "liveness for epoch %llu is unknown: no node that answered has been ready "
                      "since the epoch started (it or beaconmux restarted since), so a "
                      "validator's messages may have been missed",
                      (unsigned long long)q->epoch);
    } else {
        bm_resp_send_str(req, "application/json", &out);
    }
    bm_str_dispose(&out);
}

static bool accept_none(const bm_race_answer_t *a, void *ud)
{
    (void)a;
    (void)ud;
    return false;
}

/* Reads the request body: a non-empty JSON array of validator indices. */
static int read_indices(bm_req_t *req, uint64_t **out, size_t *n)
{
    bm_buf_t *body = bm_req_body(req);
    struct json_object *doc = NULL;
    if (!body || bm_json_parse(body->data, body->len, 0, &doc, NULL) != 0)
        return BM_EINVAL;
    int rc = BM_EINVAL;
    if (doc && json_object_is_type(doc, json_type_array)) {
        size_t len = json_object_array_length(doc);
        uint64_t *v = len && len <= MAX_INDICES ? calloc(len, sizeof *v) : NULL;
        rc = len && len <= MAX_INDICES ? (v ? 0 : BM_ENOMEM) : BM_EINVAL;
        for (size_t i = 0; i < len && rc == 0; i++)
            if (!index_value(json_object_array_get_idx(doc, i), &v[i]))
                rc = BM_EINVAL;
        if (rc == 0) {
            *out = v;
            *n = len;
        } else {
            free(v);
        }
    }
    json_object_put(doc);
    return rc;
}

static void route_liveness(bm_req_t *req, const bm_route_params_t *params, void *ud)
{
    bm_duties_t *d = ud;
    d->stats.liveness++;
    uint64_t epoch;
    if (!epoch_param(req, params, &epoch))
        return;
    live_t q = {.d = d, .epoch = epoch};
    int rc = read_indices(req, &q.indices, &q.n_indices);
    if (rc != 0) {
        if (rc == BM_ENOMEM)
            bm_resp_error(req, 500, "out of memory");
        else
            bm_resp_error(req, 400, "body must be a non-empty JSON array of validator indices");
        return;
    }
    bm_node_t *cand[BM_MAX_NODES];
    bm_serve_t s = {
        .policy =
            {
                .accept = accept_none, /* every node's answer is wanted */
                .hard_timeout_ms = bm_clock_wall_now(d->clock) + d->o.liveness_timeout_ms,
                .connect_timeout_ms = d->o.connect_timeout_ms,
            },
        .nodes = cand,
        .n = bm_pool_candidates(d->pool, BM_POOL_PREFER_REACHABLE, false, cand, BM_MAX_NODES),
        .forward_body = true,
        .ctx = &q,
        .ctx_size = sizeof q,
        .ctx_dispose = live_dispose,
        .respond = on_live_respond, /* the race runs on when the client leaves: it is bounded */
        .shadow = d->shadow,
        .shadow_read = {BM_SHADOW_LIVENESS, NULL, 0},
    };
    bm_serve(d->race, req, &s, NULL);
}

/* ---- lifetime ---------------------------------------------------------------------------- */

bm_duties_t *bm_duties_new(bm_clock_t *clock, bm_race_engine_t *race, bm_pool_t *pool,
                           const bm_chain_info_t *chain, const bm_duties_opts_t *o)
{
    if (!clock || !race || !pool || !chain)
        return NULL;
    bm_duties_t *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->clock = clock;
    d->race = race;
    d->pool = pool;
    d->chain = chain;
    if (o)
        d->o = *o;
    else
        bm_duties_opts_default(&d->o);
    if (!d->o.repoll_ms)
        d->o.repoll_ms = 250;
    d->lim_mismatch.window_ms = d->lim_disagree.window_ms = 60000;
    d->lim_mismatch.burst = d->lim_disagree.burst = 5;
    uint64_t now = bm_clock_wall_now(d->clock);
    for (size_t i = 0; i < bm_pool_count(pool); i++) {
        bm_node_t *node = bm_pool_node(pool, i);
        uint64_t *cell = ready_cell(d, node->index);
        if (cell && node->state == BM_NODE_READY)
            *cell = now;
    }
    if (bm_pool_on_state(pool, on_state, d) != 0) {
        free(d->ready_since);
        free(d);
        return NULL;
    }
    return d;
}

void bm_duties_set_head(bm_duties_t *d, const bm_head_t *head)
{
    if (d)
        d->head = head;
}

void bm_duties_set_shadow(bm_duties_t *d, bm_shadow_t *shadow)
{
    d->shadow = shadow;
}

void bm_duties_free(bm_duties_t *d)
{
    if (!d)
        return;
    free(d->ready_since);
    free(d);
}

int bm_duties_register(bm_duties_t *d, bm_router_t *r)
{
    if (!d || !r)
        return BM_EINVAL;
    static const struct {
        const char *method, *pattern;
        bm_route_fn fn;
    } routes[] = {
        {"POST", "/eth/v1/validator/duties/attester/{epoch}", route_attester},
        {"GET", "/eth/v1/validator/duties/proposer/{epoch}", route_proposer_v1},
        {"GET", "/eth/v2/validator/duties/proposer/{epoch}", route_proposer_v2},
        {"POST", "/eth/v1/validator/duties/sync/{epoch}", route_sync},
        {"POST", "/eth/v1/validator/duties/ptc/{epoch}", route_ptc},
        {"POST", "/eth/v1/validator/liveness/{epoch}", route_liveness},
    };
    int rc = 0;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0] && !rc; i++)
        rc = bm_router_add(r, routes[i].method, routes[i].pattern, routes[i].fn, d);
    return rc;
}

const bm_duties_stats_t *bm_duties_stats(const bm_duties_t *d)
{
    return &d->stats;
}
