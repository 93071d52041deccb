/* SPDX-License-Identifier: MIT */
/*
 * observe: the listeners that keep observe's own figures, the settling of the journal, and
 * the routes (see observe.h). The exposition itself is metrics.c, the access log's lines
 * access.c, the dashboard's files ui.c.
 */
#include "observe/observe.h"

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/defaults.h"
#include "base/err.h"
#include "base/json.h"
#include "base/log.h"
#include "observe/access.h"
#include "observe/expo.h"
#include "observe/metrics.h"
#include "observe/ui.h"

#define DASHBOARD_JOURNAL_SLOTS 16 /* the journal's slots the dashboard shows */
#define JOURNAL_DEFAULT_SLOTS 32   /* a journal read without from_slot */
#define JOURNAL_STATE_SLOTS 256    /* the newest slots a state file keeps (51 min of 12-s slots) */

/* Duty races, seconds: a fresh answer comes within milliseconds, a held one at the duty's
 * deadline (a second by default, two at most in practice). */
static const double race_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2};
/* Requests, seconds: duty reads and ordinary reads are milliseconds, reads held for a
 * deadline up to seconds. */
static const double request_bounds[] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1,
                                        0.25,  0.5,   1,    2.5,   5,    10};
/* Re-org depth, slots. */
static const double depth_bounds[] = {1, 2, 3, 4, 8, 16, 32, 64};

struct bm_observe {
    bm_observe_sources_t src;
    bm_observe_opts_t opts;
    char metrics_path[128];
    bm_observe_figures_t fig;
    bm_journal_t *journal;
    bm_arrivals_t *arrivals;
    bool listening_head;
    bool settling;      /* the first tick gave the slot the journal starts at */
    uint64_t next_prov; /* the next slot to settle provisionally */
    uint64_t next_final;
    void (*status_fn)(bm_str_t *out, void *ud);
    void *status_ud;
    bm_served_fn local_fn; /* shared state: this instance's records */
    void *local_ud;
    void (*extra_fn)(bm_str_t *out, void *ud); /* metrics of modules above this layer */
    void *extra_ud;
};

#define N(a) (sizeof(a) / sizeof((a)[0]))

void bm_observe_opts_default(bm_observe_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->journal_slots = BM_DEFAULT_JOURNAL_SLOTS;
    o->access_log = BM_DEFAULT_LOG_ACCESS;
    o->metrics = BM_DEFAULT_METRICS_ENABLED;
    o->metrics_path = BM_DEFAULT_METRICS_PATH;
    o->ui = BM_DEFAULT_UI_ENABLED;
}

const bm_observe_figures_t *bm_observe_figures(const bm_observe_t *o)
{
    return &o->fig;
}

const bm_observe_sources_t *bm_observe_sources(const bm_observe_t *o)
{
    return &o->src;
}

static const bm_slot_clock_t *chain_clock(const bm_observe_t *o)
{
    const bm_chain_info_t *c = o->src.chain;
    return c && c->known ? &c->clock : NULL;
}

/* The canonical chain at `slot` as the tracker follows it (get_block_root_at_slot). */
static void canon_of(const bm_observe_t *o, uint64_t slot, bm_canon_t *c)
{
    memset(c, 0, sizeof *c);
    if (!o->src.head)
        return;
    c->known = bm_head_root_at_slot(o->src.head, slot, c->root) == 0;
    if (slot == 0)
        c->prev_known = true; /* before genesis: nothing, so the genesis block is its own */
    else
        c->prev_known = bm_head_root_at_slot(o->src.head, slot - 1, c->prev) == 0;
}

/* ---- what happens --------------------------------------------------------------------- */

/* One record, from here or from another instance (`local` false): the answers and the
 * journal are the pair's, the race times and counts this instance's own. */
static void take_served(bm_observe_t *o, const bm_served_t *s, bool local)
{
    if (local) {
        o->fig.races[s->duty]++;
        bm_hist_add(&o->fig.race[s->duty], (double)s->race_ms / 1000.0);
    }
    bm_answer_class_t cls = s->served.cls == BM_ANSWER_FRESH || s->served.cls == BM_ANSWER_STALE
                                ? s->served.cls
                                : BM_ANSWER_ERROR;
    o->fig.served[s->duty][cls] += s->requests;
    if (!o->journal)
        return;
    const bm_slot_clock_t *clock = chain_clock(o);
    if (clock) /* the race's own time (the engine's clock): the slot it ran in has begun */
        bm_journal_advance(o->journal, bm_slot_at(clock, s->started_ms));
    bm_journal_add(o->journal, s);
}

void bm_observe_served(const bm_served_t *s, void *ud)
{
    bm_observe_t *o = ud;
    if ((unsigned)s->duty >= BM_DUTY_READ_COUNT)
        return;
    take_served(o, s, true);
    if (o->local_fn)
        o->local_fn(s, o->local_ud);
}

void bm_observe_on_local_served(bm_observe_t *o, bm_served_fn fn, void *ud)
{
    o->local_fn = fn;
    o->local_ud = ud;
}

void bm_observe_set_metrics_extra(bm_observe_t *o, void (*fn)(bm_str_t *out, void *ud), void *ud)
{
    o->extra_fn = fn;
    o->extra_ud = ud;
}

void bm_observe_metrics_extra(const bm_observe_t *o, bm_str_t *out)
{
    if (o->extra_fn)
        o->extra_fn(out, o->extra_ud);
}

void bm_observe_served_remote(bm_observe_t *o, const bm_served_t *s)
{
    if ((unsigned)s->duty >= BM_DUTY_READ_COUNT)
        return;
    o->fig.remote_records++;
    take_served(o, s, false);
}

void bm_observe_tick(bm_observe_t *o, uint64_t now_ms)
{
    const bm_slot_clock_t *clock = chain_clock(o);
    if (!clock || !o->journal)
        return;
    uint64_t cur = bm_slot_at(clock, now_ms);
    bm_journal_advance(o->journal, cur);
    if (!o->settling) {
        o->settling = true;
        o->next_prov = o->next_final = cur > 2 ? cur - 2 : 0;
    }
    uint64_t oldest = bm_journal_oldest(o->journal);
    if (o->next_prov < oldest)
        o->next_prov = oldest;
    for (; o->next_prov + 2 <= cur; o->next_prov++) {
        bm_canon_t c;
        canon_of(o, o->next_prov, &c);
        bm_journal_settle(o->journal, o->next_prov, &c, false);
    }
}

void bm_observe_finalized(bm_observe_t *o, size_t node, uint64_t epoch, const uint8_t root[32])
{
    (void)node;
    const bm_slot_clock_t *clock = chain_clock(o);
    if (!clock || !o->src.head || (o->fig.finalized_known && epoch <= o->fig.finalized_epoch))
        return;
    uint64_t start = bm_epoch_start_slot(clock, epoch);
    uint8_t on_chain[32];
    bm_head_info_t h;
    /* nothing past the cluster head is final: a claim beyond it is a node's mistake */
    if (!bm_head_cluster(o->src.head, &h) || start > h.slot)
        return;
    if (bm_head_root_at_slot(o->src.head, start, on_chain) != 0 || memcmp(on_chain, root, 32) != 0)
        return; /* not (provably) on the cluster chain: a forked or lagging node's word */
    o->fig.finalized_known = true;
    o->fig.finalized_epoch = epoch;
    if (!o->journal || !o->settling)
        return;
    uint64_t from = o->next_final, oldest = bm_journal_oldest(o->journal);
    if (from < oldest)
        from = oldest;
    for (uint64_t s = from; s <= start; s++) {
        bm_canon_t c;
        canon_of(o, s, &c);
        bm_journal_settle(o->journal, s, &c, true);
    }
    if (start + 1 > o->next_final)
        o->next_final = start + 1;
}

static void on_move(const bm_head_change_t *c, void *ud)
{
    bm_observe_t *o = ud;
    if (c->move == BM_HEAD_MOVE_REORG) {
        o->fig.moves_reorg++;
        if (c->depth_known)
            bm_hist_add(&o->fig.reorg_depth, (double)c->depth);
    } else if (c->by_quorum || c->move == BM_HEAD_MOVE_FIRST) {
        o->fig.moves_quorum++;
    } else {
        o->fig.moves_extension++;
    }
}

static void on_node(size_t node, void *ud)
{
    bm_observe_t *o = ud;
    bm_head_node_view_t v;
    if (o->arrivals && bm_head_node_view(o->src.head, node, &v) == 0)
        bm_arrivals_on_view(o->arrivals, node, &v, chain_clock(o));
}

static void on_tick(uint64_t now_ms, void *ud)
{
    bm_observe_tick(ud, now_ms);
}

/* The monitor's events: finalized checkpoints settle the journal. */
static void on_event(size_t node, const bm_node_event_t *e, void *ud)
{
    if (strcmp(e->topic, "finalized_checkpoint") != 0)
        return;
    uint64_t epoch;
    uint8_t root[32];
    if (bm_json_get_u64(e->doc, "/epoch", &epoch) == 0 &&
        bm_json_get_root(e->doc, "/block", root) == 0)
        bm_observe_finalized(ud, node, epoch, root);
}

/* ---- requests ------------------------------------------------------------------------------ */

static size_t class_index(bm_observe_t *o, const char *cls)
{
    if (!cls)
        cls = "other";
    bm_observe_figures_t *f = &o->fig;
    for (size_t i = 0; i < f->n_classes; i++)
        if (f->classes[i] == cls || strcmp(f->classes[i], cls) == 0)
            return i;
    if (f->n_classes == BM_OBSERVE_MAX_CLASSES - 1 && strcmp(cls, "other") != 0)
        return class_index(o, "other"); /* the last place is kept for "other" */
    bm_hist_init(&f->request_seconds[f->n_classes], request_bounds, N(request_bounds));
    f->classes[f->n_classes] = cls;
    return f->n_classes++;
}

void bm_observe_request_ended(const bm_req_summary_t *s, void *ud)
{
    bm_observe_t *o = ud;
    size_t c = class_index(o, s->route_class);
    int k = s->status >= 100 && s->status <= 599 ? s->status / 100 : BM_CODE_NONE;
    o->fig.requests[c][k]++;
    bm_hist_add(&o->fig.request_seconds[c], (double)s->duration_us / 1e6);
    if (!o->opts.access_log)
        return;
    const char *ids[BM_MAX_NODES];
    size_t n = bm_pool_count(o->src.pool);
    for (size_t i = 0; i < n && i < BM_MAX_NODES; i++)
        ids[i] = bm_pool_node(o->src.pool, i)->id;
    bm_access_log(s, ids, n < BM_MAX_NODES ? n : BM_MAX_NODES);
}

void bm_observe_set_front(bm_observe_t *o, const bm_front_t *front)
{
    o->src.front = front;
}

void bm_observe_set_server(bm_observe_t *o, bm_server_t *srv)
{
    o->src.server = srv;
}

void bm_observe_set_status(bm_observe_t *o, void (*fn)(bm_str_t *out, void *ud), void *ud)
{
    o->status_fn = fn;
    o->status_ud = ud;
}

/* ---- lifetime ------------------------------------------------------------------------------ */

bm_observe_t *bm_observe_new(const bm_observe_sources_t *src, const bm_observe_opts_t *opts)
{
    if (!src || !src->pool)
        return NULL;
    bm_observe_t *o = calloc(1, sizeof *o);
    if (!o)
        return NULL;
    o->src = *src;
    if (opts)
        o->opts = *opts;
    else
        bm_observe_opts_default(&o->opts);
    snprintf(o->metrics_path, sizeof o->metrics_path, "%s",
             o->opts.metrics_path ? o->opts.metrics_path : "/metrics");
    o->opts.metrics_path = o->metrics_path;
    for (int d = 0; d < BM_DUTY_READ_COUNT; d++)
        bm_hist_init(&o->fig.race[d], race_bounds, N(race_bounds));
    bm_hist_init(&o->fig.reorg_depth, depth_bounds, N(depth_bounds));
    size_t n = bm_pool_count(src->pool);
    if (o->opts.journal_slots && !(o->journal = bm_journal_new(o->opts.journal_slots)))
        goto fail;
    if (n && !(o->arrivals = bm_arrivals_new(n < BM_MAX_NODES ? n : BM_MAX_NODES)))
        goto fail;
    o->fig.journal = o->journal;
    o->fig.arrivals = o->arrivals;
    if (src->head) {
        bm_head_listener_t l = {.head = on_move, .node = on_node, .tick = on_tick};
        if (bm_head_listen(src->head, &l, o) != 0)
            goto fail;
        o->listening_head = true;
    }
    if (src->monitor && bm_monitor_on_event(src->monitor, on_event, o) != 0)
        goto fail;
    bool witness = o->journal != NULL;
    if (src->attest)
        bm_attest_on_served(src->attest, bm_observe_served, o, witness);
    if (src->produce)
        bm_produce_on_served(src->produce, bm_observe_served, o, witness);
    return o;
fail:
    bm_observe_free(o);
    return NULL;
}

void bm_observe_free(bm_observe_t *o)
{
    if (!o)
        return;
    if (o->listening_head)
        bm_head_unlisten(o->src.head, o);
    if (o->src.attest)
        bm_attest_on_served(o->src.attest, NULL, NULL, false);
    if (o->src.produce)
        bm_produce_on_served(o->src.produce, NULL, NULL, false);
    bm_journal_free(o->journal);
    bm_arrivals_free(o->arrivals);
    free(o);
}

/* ---- routes -------------------------------------------------------------------------------- */

static void send_str(bm_req_t *req, bm_str_t *s, const char *ctype)
{
    bm_buf_t *b = bm_str_finish(s);
    if (!b) {
        bm_resp_error(req, 500, "out of memory");
        return;
    }
    bm_resp_send(req, 200, ctype, b, NULL);
    bm_buf_unref(b);
}

static void route_metrics(bm_req_t *req, const bm_route_params_t *p, void *ud)
{
    (void)p;
    bm_str_t s = BM_STR_INIT;
    bm_str_reserve(&s, 64 << 10);
    bm_metrics_write(ud, &s);
    send_str(req, &s, BM_EXPO_CONTENT_TYPE);
}

/* The node ids in pool order, for JSON. */
static size_t node_ids(const bm_observe_t *o, const char **ids)
{
    size_t n = bm_pool_count(o->src.pool);
    if (n > BM_MAX_NODES)
        n = BM_MAX_NODES;
    for (size_t i = 0; i < n; i++)
        ids[i] = bm_pool_node(o->src.pool, i)->id;
    return n;
}

int bm_observe_export_journal(void *ud, uint64_t now_ms, bm_str_t *out)
{
    const bm_observe_t *o = ud;
    (void)now_ms;
    if (!o->journal)
        return BM_ENOTFOUND;
    const char *ids[BM_MAX_NODES];
    size_t n = node_ids(o, ids);
    return bm_journal_export(o->journal, JOURNAL_STATE_SLOTS, ids, n, out);
}

int bm_observe_import_journal(void *ud, const char *json, size_t len, uint64_t now_ms)
{
    bm_observe_t *o = ud;
    (void)now_ms; /* slots are on the chain's clock: a saved slot stays where it was */
    if (!o->journal)
        return BM_ENOTFOUND;
    const char *ids[BM_MAX_NODES];
    size_t n = node_ids(o, ids);
    return bm_journal_import(o->journal, json, len, ids, n);
}

static void counts_json(bm_str_t *s, const bm_journal_counts_t *c)
{
    uint64_t v[BM_VERDICT_COUNT] = {0};
    for (int d = 0; d < BM_DUTY_READ_COUNT; d++)
        for (int k = 0; k < BM_VERDICT_COUNT; k++)
            v[k] += c->verdicts[d][k];
    bm_str_printf(s,
                  "{\"correct\":%llu,\"wrong\":%llu,\"missed\":%llu,\"unknown\":%llu,"
                  "\"saved\":%llu,\"lost\":%llu}",
                  (unsigned long long)v[BM_VERDICT_CORRECT],
                  (unsigned long long)v[BM_VERDICT_WRONG], (unsigned long long)v[BM_VERDICT_MISSED],
                  (unsigned long long)v[BM_VERDICT_UNKNOWN], (unsigned long long)c->saved,
                  (unsigned long long)c->lost);
}

/* "summary": the journal's counts (both stages) and where it stands. */
static void summary_json(const bm_observe_t *o, bm_str_t *s)
{
    const bm_journal_stats_t *st = bm_journal_stats(o->journal);
    bm_str_puts(s, "{\"provisional\":");
    counts_json(s, &st->provisional);
    bm_str_puts(s, ",\"final\":");
    counts_json(s, &st->final);
    bm_str_printf(s,
                  ",\"records\":%llu,\"refused\":%llu,\"newest_slot\":\"%llu\","
                  "\"final_slot\":\"%llu\",\"oldest_slot\":\"%llu\",\"capacity\":%u",
                  (unsigned long long)st->records, (unsigned long long)st->refused,
                  (unsigned long long)st->newest_slot, (unsigned long long)st->final_slot,
                  (unsigned long long)bm_journal_oldest(o->journal),
                  (unsigned)bm_journal_capacity(o->journal));
    if (o->fig.finalized_known)
        bm_str_printf(s, ",\"finalized_epoch\":\"%llu\"",
                      (unsigned long long)o->fig.finalized_epoch);
    bm_str_putc(s, '}');
}

/* The value of query parameter `name` (its first occurrence) as a span; false when absent. */
static bool query_value(const char *q, size_t qlen, const char *name, const char **v, size_t *vlen)
{
    size_t nl = strlen(name);
    while (q && qlen) {
        const char *amp = memchr(q, '&', qlen);
        size_t len = amp ? (size_t)(amp - q) : qlen;
        if (len >= nl && memcmp(q, name, nl) == 0 && (len == nl || q[nl] == '=')) {
            *v = q + (len > nl ? nl + 1 : nl);
            *vlen = len > nl ? len - nl - 1 : 0;
            return true;
        }
        if (!amp)
            break;
        qlen -= len + 1;
        q = amp + 1;
    }
    return false;
}

/* Reads slot parameter `name` into *v; false (and a 400 sent) when present and invalid. */
static bool slot_param(bm_req_t *req, const char *name, bool *given, uint64_t *v)
{
    size_t qlen, vlen;
    const char *q = bm_req_query(req, &qlen), *val;
    *given = query_value(q, qlen, name, &val, &vlen);
    if (*given && (vlen == 0 || bm_json_parse_u64(val, vlen, v) != 0)) {
        bm_resp_error(req, 400, "Invalid %s: a slot number is expected", name);
        return false;
    }
    return true;
}

static void route_journal(bm_req_t *req, const bm_route_params_t *p, void *ud)
{
    (void)p;
    bm_observe_t *o = ud;
    if (!o->journal) {
        bm_resp_error(req, 404, "the duty journal is off (journal.slots: 0)");
        return;
    }
    const bm_journal_stats_t *st = bm_journal_stats(o->journal);
    bool has_from, has_to;
    uint64_t from = 0, to = st->newest_slot;
    if (!slot_param(req, "from_slot", &has_from, &from) ||
        !slot_param(req, "to_slot", &has_to, &to))
        return;
    if (!has_from)
        from = to >= JOURNAL_DEFAULT_SLOTS - 1 ? to - (JOURNAL_DEFAULT_SLOTS - 1) : 0;
    if (from > to) {
        bm_resp_error(req, 400, "Invalid range: from_slot %llu is after to_slot %llu",
                      (unsigned long long)from, (unsigned long long)to);
        return;
    }
    const char *ids[BM_MAX_NODES];
    size_t n = node_ids(o, ids);
    bm_str_t s = BM_STR_INIT;
    bm_str_puts(&s, "{\"summary\":");
    summary_json(o, &s);
    bm_str_puts(&s, ",\"journal\":");
    bm_journal_json(o->journal, from, to, ids, n, &s);
    bm_str_putc(&s, '}');
    send_str(req, &s, "application/json");
}

/* The canonical root for the heatmap: known up to the cluster head's slot, from the tracker,
 * or, for slots older than its block knowledge, as the journal settled it. */
static int heatmap_canon(uint64_t slot, uint8_t root[32], void *ud)
{
    const bm_observe_t *o = ud;
    bm_head_info_t h;
    if (!o->src.head || !bm_head_cluster(o->src.head, &h) || slot > h.slot)
        return BM_EUNAVAIL;
    if (bm_head_root_at_slot(o->src.head, slot, root) == 0)
        return 0;
    bm_journal_slot_t js;
    if (o->journal && bm_journal_slot(o->journal, slot, &js) && js.stage != BM_STAGE_OPEN &&
        js.canon.known) {
        memcpy(root, js.canon.root, 32);
        return 0;
    }
    return BM_ENOTFOUND;
}

/* Everything the web dashboard shows, in one document (it polls this once a second). */
static void route_dashboard(bm_req_t *req, const bm_route_params_t *p, void *ud)
{
    (void)p;
    bm_observe_t *o = ud;
    const bm_slot_clock_t *clock = chain_clock(o);
    uint64_t now = bm_clock_now_ms();
    const char *ids[BM_MAX_NODES];
    size_t n = node_ids(o, ids);
    bm_str_t s = BM_STR_INIT;
    bm_str_printf(&s, "{\"now_ms\":%llu", (unsigned long long)now);
    if (clock)
        bm_str_printf(&s, ",\"slot\":\"%llu\",\"slot_ms\":%u,\"slots_per_epoch\":%u",
                      (unsigned long long)bm_slot_at(clock, now), clock->slot_ms,
                      clock->slots_per_epoch);
    if (o->fig.finalized_known)
        bm_str_printf(&s, ",\"finalized_epoch\":\"%llu\"",
                      (unsigned long long)o->fig.finalized_epoch);
    bm_str_puts(&s, ",\"status\":");
    if (o->status_fn)
        o->status_fn(&s, o->status_ud);
    else
        bm_str_puts(&s, "null");
    bm_str_puts(&s, ",\"arrivals\":");
    if (o->arrivals && clock)
        bm_arrivals_json(o->arrivals, bm_slot_at(clock, now), heatmap_canon, o, ids, n, &s);
    else
        bm_str_puts(&s, "null");
    bm_str_puts(&s, ",\"journal\":");
    if (o->journal) {
        uint64_t to = bm_journal_stats(o->journal)->newest_slot;
        uint64_t from = to >= DASHBOARD_JOURNAL_SLOTS ? to - DASHBOARD_JOURNAL_SLOTS : 0;
        bm_journal_json(o->journal, from, to, ids, n, &s);
        bm_str_puts(&s, ",\"summary\":");
        summary_json(o, &s);
    } else {
        bm_str_puts(&s, "null,\"summary\":null");
    }
    bm_str_putc(&s, '}');
    send_str(req, &s, "application/json");
}

static void route_merged(bm_req_t *req, const bm_route_params_t *p, void *ud)
{
    (void)p;
    const bm_observe_set_t *set = ud;
    bm_str_t s = BM_STR_INIT;
    bm_str_reserve(&s, set->n * (64 << 10));
    if (bm_metrics_write_merged(set->obs, set->ids, set->n, &s) != 0) {
        bm_str_dispose(&s);
        bm_resp_error(req, 500, "out of memory");
        return;
    }
    send_str(req, &s, BM_EXPO_CONTENT_TYPE);
}

int bm_observe_register_merged(const bm_observe_set_t *set, bm_router_t *r)
{
    if (!set->n || !set->obs[0]->opts.metrics)
        return 0;
    return bm_router_add_only(r, "GET", set->obs[0]->opts.metrics_path, route_merged, (void *)set);
}

int bm_observe_register(bm_observe_t *o, bm_router_t *r, bool with_metrics)
{
    int rc = 0;
    if (o->opts.metrics && with_metrics)
        rc = bm_router_add_only(r, "GET", o->opts.metrics_path, route_metrics, o);
    if (!rc)
        rc = bm_router_add_only(r, "GET", "/beaconmux/v1/journal", route_journal, o);
    if (!rc && o->opts.ui)
        rc = bm_router_add_only(r, "GET", "/beaconmux/v1/dashboard", route_dashboard, o);
    if (!rc && o->opts.ui)
        rc = bm_ui_register(r);
    return rc;
}
