/* SPDX-License-Identifier: MIT */
/*
 * shadow: the mirror of a race to the shadow nodes and their score (see shadow.h).
 *
 * How it is built:
 *   - one record per shadow node (snode_t), indexed by pool index, with its counters and a
 *     ring of its last latencies;
 *   - one record per mirrored race (bm_shadow_mirror), with two references: serve's (the
 *     served answer comes through it) and the mirror race's (the shadows' answers come
 *     through its completion). Whichever of the two comes second compares; the last
 *     reference to go frees the record, touching nothing else.
 */
#include "duties/shadow.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/json.h"

#define LAT_RING 64

typedef struct snode {
    bm_node_t *node;
    bm_shadow_counts_t total;
    bm_shadow_counts_t duty[BM_SHADOW_DUTY_COUNT];
    uint32_t lat_us[LAT_RING];
    uint32_t lat_n, lat_pos;
} snode_t;

struct bm_shadow {
    bm_race_engine_t *race;
    bm_pool_t *pool;
    const bm_head_t *head;
    snode_t *by_index; /* one per pool node; `node` NULL for the nodes that are no shadow */
    size_t n_pool;
    bm_node_t **nodes; /* the shadow nodes, in pool order */
    size_t n;
};

/* One shadow node's answer, kept from the mirror's completion until the comparison. */
typedef struct sanswer {
    int index; /* pool index */
    bool ok;   /* a readable 2xx */
    bm_shadow_view_t view;
    uint64_t arrived_ms;
} sanswer_t;

struct bm_shadow_mirror {
    int refs;
    bm_shadow_t *s; /* used only from the engine's callbacks (see shadow.h, lifetime) */
    bm_shadow_read_t how;
    uint64_t deadline_ms;
    bool served_in; /* bm_shadow_served ran */
    bool served_ok; /* ... with a readable 2xx */
    bm_shadow_view_t served;
    uint64_t served_ms;
    bool shadows_in; /* the mirror race completed */
    size_t n;
    sanswer_t ans[];
};

static const char *const DUTY_NAMES[BM_SHADOW_DUTY_COUNT] = {"attestation_data",
                                                             "head_root",
                                                             "payload_attestation_data",
                                                             "aggregate_attestation",
                                                             "sync_committee_contribution",
                                                             "block",
                                                             "duties",
                                                             "liveness"};

const char *bm_shadow_duty_name(bm_shadow_duty_t d)
{
    return (unsigned)d < BM_SHADOW_DUTY_COUNT ? DUTY_NAMES[d] : "unknown";
}

bm_shadow_t *bm_shadow_new(bm_race_engine_t *race, bm_pool_t *pool, const bm_head_t *head)
{
    if (!race || !pool)
        return NULL;
    bm_shadow_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->race = race;
    s->pool = pool;
    s->head = head;
    s->n_pool = bm_pool_count(pool);
    s->by_index = calloc(s->n_pool ? s->n_pool : 1, sizeof *s->by_index);
    s->nodes = calloc(s->n_pool ? s->n_pool : 1, sizeof *s->nodes);
    if (!s->by_index || !s->nodes) {
        bm_shadow_free(s);
        return NULL;
    }
    for (size_t i = 0; i < s->n_pool; i++) {
        bm_node_t *node = bm_pool_node(pool, i);
        if (node->shadow) {
            s->by_index[i].node = node;
            s->nodes[s->n++] = node;
        }
    }
    return s;
}

void bm_shadow_free(bm_shadow_t *s)
{
    if (!s)
        return;
    free(s->by_index);
    free(s->nodes);
    free(s);
}

size_t bm_shadow_count(const bm_shadow_t *s)
{
    return s ? s->n : 0;
}

/* ---- the score -------------------------------------------------------------------------- */

/* Counts one in a node's totals and in its counters of the mirror's duty. */
#define BOTH(sn, m, field) ((sn)->total.field++, (sn)->duty[(m)->how.duty].field++)

static void note_latency(snode_t *sn, uint64_t us)
{
    sn->lat_us[sn->lat_pos] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
    sn->lat_pos = (sn->lat_pos + 1) % LAT_RING;
    if (sn->lat_n < LAT_RING)
        sn->lat_n++;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static double latency_pct(const snode_t *sn, double pct)
{
    if (sn->lat_n == 0)
        return 0;
    uint32_t v[LAT_RING];
    memcpy(v, sn->lat_us, sn->lat_n * sizeof v[0]);
    qsort(v, sn->lat_n, sizeof v[0], cmp_u32);
    size_t idx = (size_t)ceil((double)sn->lat_n * pct / 100.0);
    idx = idx == 0 ? 0 : idx - 1;
    if (idx >= sn->lat_n)
        idx = sn->lat_n - 1;
    return (double)v[idx] / 1000.0;
}

static snode_t *snode_of(bm_shadow_t *s, const bm_node_t *node)
{
    if (!node || node->index < 0 || (size_t)node->index >= s->n_pool)
        return NULL;
    snode_t *sn = &s->by_index[node->index];
    return sn->node ? sn : NULL;
}

/* One shadow answer against the served one. */
static void judge_one(bm_shadow_mirror_t *m, snode_t *sn, const sanswer_t *an)
{
    const bm_shadow_view_t *got = &an->view, *want = &m->served;
    if (!an->ok || !m->served_ok || !got->has_root || !want->has_root)
        return;
    BOTH(sn, m, compared);
    bool agreed = memcmp(got->root, want->root, 32) == 0;
    if (agreed) {
        BOTH(sn, m, agreed);
    } else {
        switch (bm_head_relation_of(m->s->head, got->root, want->root)) {
        case BM_HEAD_REL_ANCESTOR:
            BOTH(sn, m, behind);
            break;
        case BM_HEAD_REL_DESCENDANT:
            BOTH(sn, m, ahead);
            break;
        default:
            BOTH(sn, m, other);
            break;
        }
    }
    if (got->has_checkpoints && want->has_checkpoints) {
        BOTH(sn, m, checkpoints_compared);
        if (bm_checkpoint_pair_equal(&got->checkpoints, &want->checkpoints))
            BOTH(sn, m, checkpoints_agreed);
        else
            agreed = false; /* the right head with the wrong target is a wrong vote */
    }
    if (!agreed)
        return;
    uint64_t by = m->deadline_ms ? m->deadline_ms : m->served_ms;
    if (an->arrived_ms <= by)
        BOTH(sn, m, in_time);
    else
        BOTH(sn, m, late);
}

/* Both sides are in: every shadow answer against the served one. From an engine callback. */
static void judge(bm_shadow_mirror_t *m)
{
    for (size_t i = 0; i < m->n; i++) {
        snode_t *sn = snode_of(m->s, bm_pool_node(m->s->pool, (size_t)m->ans[i].index));
        if (sn)
            judge_one(m, sn, &m->ans[i]);
    }
}

/* ---- the mirror ------------------------------------------------------------------------- */

static void mirror_unref(bm_shadow_mirror_t *m)
{
    if (m && --m->refs == 0)
        free(m);
}

void bm_shadow_release(bm_shadow_mirror_t *m)
{
    mirror_unref(m);
}

/* The mirror race is freed (race.h ud_dispose): its reference goes. */
static void mirror_race_dispose(void *ud)
{
    mirror_unref(ud);
}

static bool read_answer(const bm_shadow_mirror_t *m, const bm_race_answer_t *a,
                        bm_shadow_view_t *out)
{
    memset(out, 0, sizeof *out);
    if (!a || a->err || a->status < 200 || a->status > 299)
        return false;
    return !m->how.read || m->how.read(a->headers, a->body, m->how.arg, out);
}

/* Every shadow node answered (or failed, or was cut at the end): count, keep, compare. */
static void on_mirror_complete(bm_race_t *r, const bm_race_answer_t *answers, size_t n, void *ud)
{
    bm_shadow_mirror_t *m = ud;
    (void)r;
    for (size_t i = 0; i < n && i < m->n; i++) {
        const bm_race_answer_t *a = &answers[i];
        sanswer_t *an = &m->ans[i];
        snode_t *sn = snode_of(m->s, a->node);
        an->index = a->node ? a->node->index : -1;
        an->ok = read_answer(m, a, &an->view);
        an->arrived_ms = a->arrived_ms;
        if (!sn)
            continue;
        if (an->ok) {
            BOTH(sn, m, answered);
            note_latency(sn, a->elapsed_us);
        } else {
            BOTH(sn, m, errors);
        }
    }
    m->shadows_in = true;
    if (m->served_in)
        judge(m);
}

void bm_shadow_served(bm_shadow_mirror_t *m, const bm_race_answer_t *a)
{
    if (!m || m->served_in)
        return;
    m->served_in = true;
    m->served_ok = read_answer(m, a, &m->served);
    m->served_ms = a ? a->arrived_ms : 0;
    if (m->shadows_in)
        judge(m);
}

bm_shadow_mirror_t *bm_shadow_mirror(bm_shadow_t *s, const bm_race_request_t *rq,
                                     const bm_shadow_read_t *how, uint64_t deadline_ms,
                                     uint64_t end_ms, uint32_t connect_timeout_ms)
{
    if (!s || s->n == 0 || !rq || !how || (unsigned)how->duty >= BM_SHADOW_DUTY_COUNT)
        return NULL;
    bm_shadow_mirror_t *m = calloc(1, sizeof *m + s->n * sizeof m->ans[0]);
    if (!m)
        return NULL;
    m->refs = 2; /* the caller's and the mirror race's */
    m->s = s;
    m->how = *how;
    m->deadline_ms = deadline_ms;
    m->n = s->n;
    /* A detached race (the engine's write mode) that no one waits for: every 2xx is taken,
     * nothing is re-asked, every shadow's transfer runs to its end. */
    bm_race_policy_t pol = {
        .write = true,
        .hard_timeout_ms = end_ms,
        .connect_timeout_ms = connect_timeout_ms,
        .ud = m,
        .ud_dispose = mirror_race_dispose,
    };
    bm_race_t *r = bm_race_start(s->race, rq, s->nodes, s->n, &pol, NULL, on_mirror_complete, m);
    if (!r) {
        free(m); /* not started: the race never took its reference */
        return NULL;
    }
    for (size_t i = 0; i < s->n; i++) {
        snode_t *sn = snode_of(s, s->nodes[i]);
        BOTH(sn, m, mirrored);
    }
    return m;
}

/* ---- reading the figures ---------------------------------------------------------------- */

int bm_shadow_node_stats(const bm_shadow_t *s, size_t node, bm_shadow_stats_t *out)
{
    if (!s || !out || node >= s->n_pool || !s->by_index[node].node)
        return BM_EINVAL;
    const snode_t *sn = &s->by_index[node];
    out->total = sn->total;
    memcpy(out->duty, sn->duty, sizeof out->duty);
    out->latency_p50_ms = latency_pct(sn, 50);
    out->latency_p90_ms = latency_pct(sn, 90);
    return 0;
}

#define U(v) ((unsigned long long)(v))

static void counts_json(bm_str_t *o, const bm_shadow_counts_t *c)
{
    bm_str_printf(o,
                  "\"mirrored\":%llu,\"answered\":%llu,\"errors\":%llu,\"compared\":%llu,"
                  "\"agreed\":%llu,\"behind\":%llu,\"ahead\":%llu,\"other\":%llu,"
                  "\"checkpoints\":{\"compared\":%llu,\"agreed\":%llu},\"in_time\":%llu,"
                  "\"late\":%llu",
                  U(c->mirrored), U(c->answered), U(c->errors), U(c->compared), U(c->agreed),
                  U(c->behind), U(c->ahead), U(c->other), U(c->checkpoints_compared),
                  U(c->checkpoints_agreed), U(c->in_time), U(c->late));
}

/* Its head as the tracker judges it (it is followed like any node). */
static void head_json(bm_str_t *o, const bm_shadow_t *s, const bm_node_t *n)
{
    bm_head_node_view_t v;
    if (!s->head || bm_head_node_view(s->head, (size_t)n->index, &v) != 0)
        return;
    bm_str_printf(o, ",\"relation\":\"%s\",\"forked\":%s", bm_head_relation_name(v.relation),
                  v.forked ? "true" : "false");
}

void bm_shadow_status_json(bm_str_t *o, void *ud)
{
    const bm_shadow_t *s = ud;
    bm_str_puts(o, "{\"nodes\":[");
    for (size_t i = 0; s && i < s->n; i++) {
        const bm_node_t *n = s->nodes[i];
        bm_shadow_stats_t st;
        bm_shadow_node_stats(s, (size_t)n->index, &st);
        bm_str_puts(o, i ? ",{\"id\":" : "{\"id\":");
        bm_str_json_string(o, n->id, strlen(n->id));
        bm_str_printf(o, ",\"state\":\"%s\"", bm_node_state_name(n->state));
        if (n->head_lag_known)
            bm_str_printf(o, ",\"lag\":%lld", (long long)n->head_lag);
        else
            bm_str_puts(o, ",\"lag\":null");
        head_json(o, s, n);
        bm_str_putc(o, ',');
        counts_json(o, &st.total);
        /* how often a validator with this node alone would have signed what was served, in time */
        double fresh = st.total.compared ? (double)st.total.in_time / (double)st.total.compared : 0;
        bm_str_printf(o, ",\"fresh_in_time\":%.3f,\"latency_ms\":{\"p50\":%.1f,\"p90\":%.1f}",
                      fresh, st.latency_p50_ms, st.latency_p90_ms);
        bm_str_puts(o, ",\"duties\":{");
        bool first = true;
        for (int d = 0; d < BM_SHADOW_DUTY_COUNT; d++) {
            if (!st.duty[d].mirrored)
                continue;
            bm_str_printf(o, "%s\"%s\":{", first ? "" : ",", DUTY_NAMES[d]);
            counts_json(o, &st.duty[d]);
            bm_str_putc(o, '}');
            first = false;
        }
        bm_str_puts(o, "}}");
    }
    bm_str_puts(o, "]}");
}
