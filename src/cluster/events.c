/* SPDX-License-Identifier: MIT */
/*
 * events: the cluster's event stream (see events.h; docs/events.md says why).
 *
 * Three inputs, one output:
 *   - the head tracker's listener: cluster head moves (head, head_v2, chain_reorg) and
 *     the head's payload becoming full (the second head_v2);
 *   - every node's main stream events, through the monitor, and the extra streams' events:
 *     first copy wins through a bounded dedup window;
 *   - subscribers: a doubly linked list, each with its topic mask.
 * Each event is serialised once into a bm_buf_t that every interested subscriber's
 * connection references. One timer sends the keepalive comments, another reconciles
 * the extra streams with what subscribers want.
 *
 * This file holds the module, its subscribers and the node events; events_topics.c the
 * topic names, the query string, serialisation and the dedup window; events_head.c the
 * cluster head's events; events_extra.c the extra per-node streams (events_int.h).
 */
#include "cluster/events.h"

#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/defaults.h"
#include "base/err.h"
#include "base/fork.h"
#include "base/json.h"
#include "base/log.h"
#include "cluster/events_int.h"

void bm_events_opts_default(bm_events_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->keepalive_ms = BM_DEFAULT_EVENTS_KEEPALIVE_MS;
    o->subscriber_max_pending = BM_DEFAULT_EVENTS_SUBSCRIBER_MAX_PENDING;
    o->dedup_window = BM_DEFAULT_EVENTS_DEDUP_WINDOW;
    o->headers_timeout_ms = BM_DEFAULT_EVENTS_HEADERS_TIMEOUT_MS;
    o->connect_timeout_ms = BM_DEFAULT_TIMEOUTS_CONNECT_MS;
    o->extra_idle_ms = 60000;
    o->reprobe_ms = 60000;
    o->linger_ms = 1000;
    o->coalesce_ms = 3;
    o->coalesce_min_subscribers = 64;
}

const bm_events_stats_t *bm_events_stats(const bm_events_t *ev)
{
    return &ev->st;
}

/* ---- subscribers -------------------------------------------------------------------------- */

static void sub_unlink(bm_events_t *ev, sub_t *s)
{
    bm_link_unlink(&s->link);
    bool extra_gone = false;
    uint64_t now = bm_clock_mono_now(ev->clock);
    for (int t = 0; t < BM_TOPIC_COUNT; t++)
        if (s->mask & BM_TOPIC_BIT(t)) {
            if (--ev->cnt[t] == 0) {
                ev->unwanted_ms[t] = now;
                if (!(TRACKER_TOPICS & BM_TOPIC_BIT(t)))
                    extra_gone = true;
            }
        }
    ev->st.subscribers--;
    if (extra_gone)
        bm_ev_schedule_reconcile(ev, ev->o.linger_ms);
}

static void on_sub_abort(bm_req_t *req, void *ud)
{
    sub_t *s = ud;
    bm_events_t *ev = s->ev;
    bm_log(BM_LOG_DEBUG, "events: subscriber %" PRIu64 " (%s) left", s->id, bm_req_peer(req));
    sub_unlink(ev, s);
    free(s);
    bm_resp_end(req);
}

/* Drops a subscriber that fell behind: its connection is cut, the others go on. */
static void sub_drop(bm_events_t *ev, sub_t *s, size_t pending)
{
    ev->st.dropped++;
    bm_log_limited(&ev->lim_drop, BM_LOG_WARN,
                   "events: subscriber %" PRIu64 " (%s) dropped: %zu bytes unsent (limit %" PRIu64
                   ")",
                   s->id, bm_req_peer(s->req), pending, ev->o.subscriber_max_pending);
    sub_unlink(ev, s);
    bm_req_t *req = s->req;
    free(s);
    bm_resp_abort(req);
}

/*
 * Writes b to s; drops s when it has too much unsent. What our own queue holds is known
 * for free; the kernel's send queue (megabytes on loopback and LANs, where buffers grow
 * by themselves) costs a system call, so it is looked at once a check step of bytes has
 * been written to this subscriber since the last look, and at every keepalive: a stalled
 * subscriber is cut within max_pending + one step.
 */
static void sub_write(bm_events_t *ev, sub_t *s, bm_buf_t *b, bool keepalive)
{
    if (bm_resp_write(s->req, b) != 0)
        return; /* the client is gone: its abort callback removes it */
    if (keepalive) {
        ev->st.keepalives++;
    } else {
        ev->st.events_out++;
        ev->st.bytes_out += b->len;
    }
    s->unchecked += b->len;
    size_t pending = bm_resp_pending_bytes(s->req);
    if (pending <= ev->o.subscriber_max_pending && !keepalive && s->unchecked < ev->check_step)
        return;
    s->unchecked = 0;
    pending = bm_resp_unsent_bytes(s->req);
    if (pending > ev->o.subscriber_max_pending)
        sub_drop(ev, s, pending);
}

/* Writes b to every subscriber of topic t. */
static void fan_out(bm_events_t *ev, bm_topic_t t, bm_buf_t *b)
{
    bm_topic_mask_t bit = BM_TOPIC_BIT(t);
    ev->st.serialised++;
    bm_link_t *l, *nx;
    bm_list_for_each_safe (l, nx, &ev->subs) {
        sub_t *s = bm_list_entry(l, sub_t, link);
        if (s->mask & bit)
            sub_write(ev, s, b, false);
    }
}

/* Fans out the held events, in their order. */
static void release_held(bm_events_t *ev)
{
    bm_timer_stop(ev->hold);
    for (uint32_t i = 0; i < ev->nheld; i++) {
        fan_out(ev, ev->held[i].t, ev->held[i].b);
        bm_buf_unref(ev->held[i].b);
    }
    ev->nheld = 0;
}

static void on_hold(bm_timer_t *t, void *ud)
{
    (void)t;
    release_held(ud);
}

/*
 * Serialises data under topic t and fans it out (nothing when nobody wants t). With many
 * subscribers, every round of writes costs one system call per subscriber and the last
 * one waits for all the others; a node's block, gossip and payload events arrive a
 * header request before the head they announce, so they are held up to coalesce_ms and
 * leave together with that head. Head, head_v2 and chain_reorg are never held.
 */
void bm_ev_emit(bm_events_t *ev, bm_topic_t t, const char *data, size_t len)
{
    if (ev->tap)
        ev->tap(t, data, len, ev->tap_ud);
    if (!ev->cnt[t])
        return;
    bm_buf_t *b = bm_events_serialise(bm_topic_name(t), data, len);
    if (!b) {
        ev->st.bad_events++;
        bm_log_limited(&ev->lim_bad, BM_LOG_WARN, "events: %s data could not be serialised",
                       bm_topic_name(t));
        return;
    }
    if (ev->st.subscribers >= ev->o.coalesce_min_subscribers &&
        !(TRACKER_TOPICS & BM_TOPIC_BIT(t)) && ev->nheld < HOLD_MAX) {
        /* many subscribers: hold it briefly, so that it leaves with the head that usually
         * follows (one write per subscriber instead of two) */
        ev->held[ev->nheld].t = t;
        ev->held[ev->nheld++].b = b;
        if (!bm_timer_active(ev->hold))
            bm_timer_start(ev->hold, ev->o.coalesce_ms);
        return;
    }
    release_held(ev);
    fan_out(ev, t, b);
    bm_buf_unref(b);
}

static void on_keepalive(bm_timer_t *t, void *ud)
{
    bm_events_t *ev = ud;
    bm_timer_start(t, ev->o.keepalive_ms); /* every keepalive_ms, like a repeating timer */
    release_held(ev);
    bm_link_t *l, *nx;
    bm_list_for_each_safe (l, nx, &ev->subs) {
        sub_write(ev, bm_list_entry(l, sub_t, link), ev->keepalive_buf, true);
    }
}

void bm_events_route(bm_req_t *req, const bm_route_params_t *params, void *ud)
{
    bm_events_t *ev = ud;
    (void)params;
    if (ev->shutting_down) {
        bm_resp_error(req, 503, "Shutting down");
        return;
    }
    size_t qlen = 0;
    const char *q = bm_req_query(req, &qlen);
    bm_topic_mask_t mask = 0;
    char bad[128];
    int rc = bm_events_parse_topics(q, q ? qlen : 0, &mask, bad, sizeof bad);
    if (rc == BM_ENOMEM) {
        bm_resp_error(req, 500, "Out of memory");
        return;
    }
    if (rc != 0) {
        ev->st.rejected++;
        if (rc == BM_ENOTFOUND)
            bm_resp_error(req, 400, "Invalid topic: no topics given");
        else
            bm_resp_error(req, 400, "Invalid topic: %s", bad[0] ? bad : "(empty)");
        return;
    }
    sub_t *s = calloc(1, sizeof *s);
    if (!s) {
        bm_resp_error(req, 500, "Out of memory");
        return;
    }
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_hdrs_add_z(&h, "Content-Type", "text/event-stream");
    bm_hdrs_add_z(&h, "Cache-Control", "no-cache");
    bm_hdrs_add_z(&h, "X-Accel-Buffering", "no"); /* a buffering reverse proxy in front */
    rc = bm_resp_start(req, 200, &h, -1);
    bm_hdrs_dispose(&h);
    if (rc != 0) {
        free(s);
        bm_resp_end(req);
        return;
    }
    s->ev = ev;
    s->req = req;
    s->mask = mask;
    s->id = ++ev->next_id;
    bm_list_push_front(&ev->subs, &s->link);
    bool extra_new = false;
    for (int t = 0; t < BM_TOPIC_COUNT; t++)
        if (mask & BM_TOPIC_BIT(t))
            if (ev->cnt[t]++ == 0 && !(TRACKER_TOPICS & BM_TOPIC_BIT(t)))
                extra_new = true;
    ev->st.subscribers++;
    ev->st.subscribed++;
    bm_req_on_abort(req, on_sub_abort, s);
    if (bm_log_enabled(BM_LOG_DEBUG)) {
        bm_str_t names = BM_STR_INIT;
        for (int t = 0; t < BM_TOPIC_COUNT; t++)
            if (mask & BM_TOPIC_BIT(t)) {
                if (bm_str_len(&names))
                    bm_str_putc(&names, ',');
                bm_str_puts(&names, bm_topic_name(t));
            }
        bm_log(BM_LOG_DEBUG, "events: subscriber %" PRIu64 " (%s): %s", s->id, bm_req_peer(req),
               bm_str_data(&names));
        bm_str_dispose(&names);
    }
    if (extra_new)
        bm_ev_schedule_reconcile(ev, 0);
}

int bm_events_register(bm_events_t *ev, bm_router_t *r)
{
    return bm_router_add(r, "GET", "/eth/v1/events", bm_events_route, ev);
}

/* ---- node events --------------------------------------------------------------------------- */

bool bm_ev_node_trusted(const bm_events_t *ev, size_t node)
{
    if (!ev->head)
        return true;
    bm_head_node_view_t v;
    if (bm_head_node_view(ev->head, node, &v) != 0)
        return false;
    return v.may_vote && !v.forked && !v.time_discrepancy && !v.optimistic;
}

/* True when the data (or its wrapped "data") says execution_optimistic: true. */
static bool says_optimistic(struct json_object *o)
{
    bool b = false;
    if (bm_json_get_bool(o, "/execution_optimistic", &b) == 0 && b)
        return true;
    return bm_json_get_bool(o, "/data/execution_optimistic", &b) == 0 && b;
}

/* A shadow node (the tracker's observer): judged, never heard on the cluster stream. */
static bool node_observer(const bm_events_t *ev, size_t node)
{
    bm_head_node_view_t v;
    return ev->head && bm_head_node_view(ev->head, node, &v) == 0 && v.observer;
}

/* One node event; `o` is its data parsed, or NULL when it is not valid JSON. */
static void node_event(bm_events_t *ev, size_t node, const char *topic, const char *data,
                       size_t len, struct json_object *o)
{
    if (node_observer(ev, node)) {
        ev->st.shadow_events++; /* not in the dedup window either: it counts for nothing */
        return;
    }
    ev->st.node_events++;
    bm_topic_t t;
    if (bm_topic_parse(topic, strlen(topic), &t) != 0) {
        ev->st.bad_events++;
        return;
    }
    if (t == BM_TOPIC_HEAD || t == BM_TOPIC_HEAD_V2) {
        if (o && ev->pend.valid && bm_ev_node_trusted(ev, node))
            bm_ev_pend_try(ev, t == BM_TOPIC_HEAD_V2, o, data, len);
        return;
    }
    /* Every other event goes through the window, wanted or not: a copy a slow node sends
     * after a subscriber arrived is still a copy of what the cluster already had. */
    if (t == BM_TOPIC_CHAIN_REORG)
        return;
    if (!o) {
        ev->st.bad_events++;
        bm_log_limited(&ev->lim_bad, BM_LOG_WARN, "events: node %zu sent invalid %s data", node,
                       bm_topic_name(t));
        return;
    }
    if (says_optimistic(o) || ((CHAIN_TOPICS & BM_TOPIC_BIT(t)) && !bm_ev_node_trusted(ev, node))) {
        ev->st.untrusted++;
        return;
    }
    /* the key: topic and data hashed under a per-topic variant of the process key */
    uint8_t key[16];
    memcpy(key, ev->hkey, 16);
    key[0] ^= (uint8_t)(t + 1);
    uint64_t h = 0;
    int rc = bm_json_canonical_hash(o, key, &h);
    if (rc != 0) {
        ev->st.bad_events++;
        return;
    }
    if (h == 0)
        h = 1;
    if (bm_ev_dedup_has(&ev->dd, h)) {
        ev->st.duplicates++;
        return;
    }
    bm_ev_dedup_add(&ev->dd, h);
    bm_ev_emit(ev, t, data, len);
}

void bm_events_node_event(size_t node, const bm_node_event_t *e, void *ud)
{
    bm_events_t *ev = ud;
    if (ev->freed || !e || !e->topic || !e->data)
        return;
    node_event(ev, node, e->topic, e->data, e->len, e->doc);
}

void bm_events_node_text(size_t node, const char *topic, const char *data, size_t len, void *ud)
{
    bm_events_t *ev = ud;
    if (ev->freed || !topic || !data)
        return;
    struct json_object *o = NULL;
    if (bm_json_parse(data, len, 0, &o, NULL) != 0) {
        json_object_put(o);
        o = NULL;
    }
    node_event(ev, node, topic, data, len, o);
    json_object_put(o);
}

/* ---- wiring and lifetime ----------------------------------------------------------------- */

static void on_timer_closed(void *ud)
{
    bm_events_t *ev = ud;
    if (--ev->open_handles == 0)
        free(ev);
}

bm_events_t *bm_events_new(bm_clock_t *clock, const bm_events_opts_t *opts)
{
    if (!clock)
        return NULL;
    bm_events_t *ev = calloc(1, sizeof *ev);
    if (!ev)
        return NULL;
    bm_events_opts_t d;
    bm_events_opts_default(&d);
    ev->o = opts ? *opts : d;
    if (!ev->o.keepalive_ms)
        ev->o.keepalive_ms = d.keepalive_ms;
    if (!ev->o.subscriber_max_pending)
        ev->o.subscriber_max_pending = d.subscriber_max_pending;
    if (!ev->o.dedup_window)
        ev->o.dedup_window = d.dedup_window;
    if (!ev->o.connect_timeout_ms)
        ev->o.connect_timeout_ms = d.connect_timeout_ms;
    if (!ev->o.extra_idle_ms)
        ev->o.extra_idle_ms = d.extra_idle_ms;
    if (!ev->o.reprobe_ms)
        ev->o.reprobe_ms = d.reprobe_ms;
    if (!ev->o.coalesce_min_subscribers)
        ev->o.coalesce_min_subscribers = UINT32_MAX; /* 0: never hold */
    ev->clock = clock;
    bm_link_init(&ev->subs);
    ev->check_step = ev->o.subscriber_max_pending / 8;
    if (ev->check_step > 64 * 1024)
        ev->check_step = 64 * 1024;
    ev->keepalive_buf = bm_buf_from_str(":\n\n");
    ev->keepalive = bm_timer_new(clock, on_keepalive, ev);
    ev->reconcile = bm_timer_new(clock, bm_ev_on_reconcile, ev);
    ev->hold = bm_timer_new(clock, on_hold, ev);
    if (!ev->keepalive_buf || !ev->keepalive || !ev->reconcile || !ev->hold ||
        bm_ev_dedup_init(&ev->dd, ev->o.dedup_window) != 0) {
        bm_buf_unref(ev->keepalive_buf);
        bm_ev_dedup_dispose(&ev->dd);
        bm_timer_t *timers[] = {ev->keepalive, ev->reconcile, ev->hold};
        for (size_t i = 0; i < 3; i++)
            if (timers[i]) {
                ev->open_handles++;
                bm_timer_close(timers[i], on_timer_closed, ev);
            }
        if (!ev->open_handles)
            free(ev);
        return NULL;
    }
    if (uv_random(NULL, NULL, ev->hkey, sizeof ev->hkey, 0, NULL) != 0) {
        /* no entropy source: a key from the clock still differs per process */
        uint64_t a = bm_clock_now_ms() ^ ((uint64_t)(uintptr_t)ev << 16), b = bm_clock_mono_us();
        memcpy(ev->hkey, &a, 8);
        memcpy(ev->hkey + 8, &b, 8);
    }
    ev->open_handles = 3;
    bm_timer_start(ev->keepalive, ev->o.keepalive_ms);
    return ev;
}

void bm_events_attach_discovery(bm_events_t *ev, const bm_discovery_t *disc)
{
    ev->disc = disc;
}

void bm_events_set_chain(bm_events_t *ev, const bm_chain_info_t *chain)
{
    ev->chain_known = chain && chain->known;
    if (ev->chain_known)
        ev->chain = *chain;
}

void bm_events_set_tap(bm_events_t *ev, bm_events_tap_fn fn, void *ud)
{
    ev->tap = fn;
    ev->tap_ud = ud;
}

void bm_events_shutdown(bm_events_t *ev)
{
    if (!ev || ev->shutting_down)
        return;
    ev->shutting_down = true;
    release_held(ev); /* subscribers still get what was held */
    bm_timer_stop(ev->keepalive);
    bm_timer_stop(ev->reconcile);
    bm_ev_stop_streams(ev);
    while (!bm_list_empty(&ev->subs)) {
        sub_t *s = bm_list_first(&ev->subs, sub_t, link);
        bm_req_t *req = s->req;
        sub_unlink(ev, s);
        free(s);
        bm_resp_end(req);
    }
}

void bm_events_free(bm_events_t *ev)
{
    if (!ev || ev->freed)
        return;
    bm_events_shutdown(ev);
    ev->freed = true;
    if (ev->head)
        bm_head_unlisten(ev->head, ev);
    bm_ev_pend_clear(ev);
    bm_ev_dedup_dispose(&ev->dd);
    bm_buf_unref(ev->keepalive_buf);
    free(ev->x);
    ev->x = NULL;
    bm_timer_close(ev->keepalive, on_timer_closed, ev);
    bm_timer_close(ev->reconcile, on_timer_closed, ev);
    bm_timer_close(ev->hold, on_timer_closed, ev);
}
