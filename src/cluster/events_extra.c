/* SPDX-License-Identifier: MIT */
/*
 * events_extra: the extra per-node streams. Topics that a node's main stream does not carry
 * are asked of each node in a second stream, once a probe showed that the node serves each
 * topic; a timer reconciles these streams with what subscribers want.
 */
#include "cluster/events_int.h"

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

/* ---- extra streams --------------------------------------------------------------------------- */

static void xs_free(bm_events_t *ev, xstream_t *xs)
{
    if (xs->s) {
        bm_nodestream_free(xs->s);
        ev->st.extra_streams--;
    }
    memset(xs, 0, sizeof *xs);
}

static void probe_stop(xnode_t *x, bm_topic_t t)
{
    if (x->probe[t].s) {
        bm_nodestream_free(x->probe[t].s);
        x->probe[t].s = NULL;
    }
}

static void set_unsupported(xnode_t *x, bm_topic_t t, const char *why)
{
    bm_events_t *ev = x->ev;
    x->ps[t] = PS_UNSUPPORTED;
    ev->st.unsupported++;
    if (!(x->logged & BM_TOPIC_BIT(t))) {
        x->logged |= BM_TOPIC_BIT(t);
        const bm_node_t *n = ev->pool ? bm_pool_node(ev->pool, x->idx) : NULL;
        bm_log(BM_LOG_WARN,
               "events: node %s does not serve topic %s (%s); it is left out of that node's "
               "extra stream, the other topics and the node's head feed go on",
               n ? n->id : "?", bm_topic_name(t), why);
    }
}

static void probe_on_up(bm_nodestream_t *s, void *ud)
{
    probe_t *p = ud;
    xnode_t *x = p->x;
    (void)s;
    x->ps[p->t] = PS_OK;
    x->logged &= ~BM_TOPIC_BIT(p->t);
    probe_stop(x, p->t);
    bm_ev_schedule_reconcile(x->ev, 0);
}

static void probe_on_rejected(bm_nodestream_t *s, int status, const char *body, size_t len,
                              void *ud)
{
    probe_t *p = ud;
    xnode_t *x = p->x;
    (void)s;
    char why[160];
    snprintf(why, sizeof why, "HTTP %d: %.*s", status, (int)(len > 120 ? 120 : len), body);
    probe_stop(x, p->t);
    set_unsupported(x, p->t, why);
    bm_ev_schedule_reconcile(x->ev, 0);
}

/* How long a probe waits for its response head: events.headersTimeout, never less than
 * two slots (a node may send its head only with its first event). */
static uint32_t head_wait(const bm_events_t *ev)
{
    const bm_chain_info_t *c = bm_ev_chain_of(ev);
    return bm_nodestream_head_wait_ms(ev->o.headers_timeout_ms, c ? c->clock.slot_ms : 0);
}

/* A failed attempt: a 4xx means the topic list is not served; so does, for a probe (one
 * topic alone), no response head at all for its whole head wait while the node's main
 * stream is up (Lodestar before 1.10 hangs on a topic it does not know). Other failures are
 * the node's, and the stream retries. */
static bool means_unsupported(const xnode_t *x, bm_nodestream_t *s, uint64_t *hto,
                              const bm_nodestream_failure_t *f, bool probe, char *why, size_t cap)
{
    bm_nodestream_stats_t st = bm_nodestream_stats(s);
    bool header_timeout = st.header_timeouts > *hto;
    *hto = st.header_timeouts;
    if (f->was_up)
        return false;
    if (f->status >= 400 && f->status < 500 && f->status != 408 && f->status != 429) {
        snprintf(why, cap, "HTTP %d", f->status);
        return true;
    }
    if (probe && header_timeout && f->err == BM_ETIMEDOUT && x->main_up) {
        snprintf(why, cap, "no response headers within %u ms", head_wait(x->ev));
        return true;
    }
    return false;
}

static void probe_on_down(bm_nodestream_t *s, const bm_nodestream_failure_t *f, void *ud)
{
    probe_t *p = ud;
    xnode_t *x = p->x;
    char why[96];
    if (means_unsupported(x, s, &p->hto, f, true, why, sizeof why)) {
        probe_stop(x, p->t);
        set_unsupported(x, p->t, why);
        bm_ev_schedule_reconcile(x->ev, 0);
    }
}

/* Opens a stream for `mask`. A probe's silence past its head wait is a verdict (the topic
 * is not served); an extra stream carries only topics that passed their probes, so it
 * waits for its head as long as it may stay silent once up (its idle timeout). */
static bm_nodestream_t *open_stream(xnode_t *x, bm_topic_mask_t mask, bool probe,
                                    const bm_nodestream_cbs_t *cbs, void *ud)
{
    bm_events_t *ev = x->ev;
    const bm_node_t *n = bm_pool_node(ev->pool, x->idx);
    if (!n)
        return NULL;
    const char *names[BM_TOPIC_COUNT];
    size_t k = 0;
    for (int t = 0; t < BM_TOPIC_COUNT; t++)
        if (mask & BM_TOPIC_BIT(t))
            names[k++] = bm_topic_name(t);
    bm_nodestream_opts_t o;
    bm_nodestream_opts_default(&o);
    o.connect_timeout_ms = ev->o.connect_timeout_ms;
    o.headers_timeout_ms = head_wait(ev);
    o.idle_timeout_ms = ev->o.extra_idle_ms;
    if (!probe && o.headers_timeout_ms < o.idle_timeout_ms)
        o.headers_timeout_ms = o.idle_timeout_ms;
    bm_nodestream_t *s = bm_nodestream_new(ev->clock, ev->up, n->url, n->extra.n ? &n->extra : NULL,
                                           names, k, &o, cbs, ud);
    if (s && bm_nodestream_start(s) != 0) {
        bm_nodestream_free(s);
        s = NULL;
    }
    return s;
}

static void probe_start(xnode_t *x, bm_topic_t t)
{
    static const bm_nodestream_cbs_t cbs = {
        .on_up = probe_on_up, .on_down = probe_on_down, .on_rejected = probe_on_rejected};
    probe_t *p = &x->probe[t];
    p->x = x;
    p->t = t;
    p->hto = 0;
    p->s = open_stream(x, BM_TOPIC_BIT(t), true, &cbs, p);
    if (p->s) {
        x->ps[t] = PS_PROBING;
        x->ev->st.probes++;
    }
}

static void xs_on_event(bm_nodestream_t *s, const char *topic, size_t topic_len, const char *data,
                        size_t data_len, void *ud)
{
    xnode_t *x = ud;
    (void)s;
    (void)topic_len;
    bm_events_node_text(x->idx, topic, data, data_len, x->ev);
}

static void xs_on_up(bm_nodestream_t *s, void *ud)
{
    xnode_t *x = ud;
    if (s == x->next.s) {
        /* the replacement is up: the old stream goes (events in the overlap dedup) */
        xs_free(x->ev, &x->cur);
        x->cur = x->next;
        memset(&x->next, 0, sizeof x->next);
    }
}

/* The combined stream was refused although each topic passed its probe alone: probe them
 * again (at most once per reprobe period), so the culprit is found and dropped. */
static void xs_refused(xnode_t *x, bm_nodestream_t *s, const char *why)
{
    bm_events_t *ev = x->ev;
    uint64_t now = bm_clock_mono_now(ev->clock);
    if (x->last_reprobe_ms && now - x->last_reprobe_ms < ev->o.reprobe_ms)
        return; /* the stream retries after its longest backoff step */
    x->last_reprobe_ms = now;
    xstream_t *xs = s == x->cur.s ? &x->cur : &x->next;
    const bm_node_t *n = ev->pool ? bm_pool_node(ev->pool, x->idx) : NULL;
    bm_log(BM_LOG_WARN, "events: node %s refused its extra stream (%s); probing its topics again",
           n ? n->id : "?", why);
    for (int t = 0; t < BM_TOPIC_COUNT; t++)
        if ((xs->mask & BM_TOPIC_BIT(t)) && x->ps[t] == PS_OK)
            x->ps[t] = PS_UNKNOWN;
    xs_free(ev, xs);
    bm_ev_schedule_reconcile(ev, 0);
}

static void xs_on_rejected(bm_nodestream_t *s, int status, const char *body, size_t len, void *ud)
{
    char why[160];
    snprintf(why, sizeof why, "HTTP %d: %.*s", status, (int)(len > 120 ? 120 : len), body);
    xs_refused(ud, s, why);
}

static void xs_on_down(bm_nodestream_t *s, const bm_nodestream_failure_t *f, void *ud)
{
    xnode_t *x = ud;
    xstream_t *xs = s == x->cur.s ? &x->cur : &x->next;
    char why[96];
    /* its topics passed their probes: silence is quiet topics, not a refusal */
    if (means_unsupported(x, s, &xs->hto, f, false, why, sizeof why))
        xs_refused(x, s, why);
}

static void reconcile_node(bm_events_t *ev, xnode_t *x, bm_topic_mask_t wanted)
{
    static const bm_nodestream_cbs_t cbs = {.on_event = xs_on_event,
                                            .on_up = xs_on_up,
                                            .on_down = xs_on_down,
                                            .on_rejected = xs_on_rejected};
    bm_topic_mask_t need = wanted & ~MAIN_TOPICS, ok = 0;
    for (int t = 0; t < BM_TOPIC_COUNT; t++) {
        bm_topic_mask_t bit = BM_TOPIC_BIT(t);
        if ((need & bit) && x->ps[t] == PS_UNKNOWN)
            probe_start(x, (bm_topic_t)t);
        else if (!(need & bit) && x->ps[t] == PS_PROBING) {
            probe_stop(x, (bm_topic_t)t);
            x->ps[t] = PS_UNKNOWN;
        }
        if (x->ps[t] == PS_OK)
            ok |= bit;
    }
    bm_topic_mask_t desired = need & ok;
    bm_topic_mask_t target = x->next.s ? x->next.mask : x->cur.mask;
    if (desired == target)
        return;
    if (!desired) {
        xs_free(ev, &x->next);
        xs_free(ev, &x->cur);
        return;
    }
    if (desired == x->cur.mask && x->cur.s) {
        xs_free(ev, &x->next); /* back to what already runs */
        return;
    }
    xstream_t *xs;
    if (!x->cur.s || !bm_nodestream_connected(x->cur.s)) {
        /* nothing flows now: replace in place */
        xs_free(ev, &x->next);
        xs = &x->cur;
    } else {
        xs = &x->next; /* make before break */
    }
    xs_free(ev, xs);
    xs->s = open_stream(x, desired, false, &cbs, x);
    if (xs->s) {
        xs->mask = desired;
        ev->st.extra_streams++;
    }
}

void bm_ev_on_reconcile(bm_timer_t *t, void *ud)
{
    bm_events_t *ev = ud;
    (void)t;
    if (!ev->x || ev->shutting_down)
        return;
    uint64_t now = bm_clock_mono_now(ev->clock), again = 0;
    bm_topic_mask_t wanted = 0;
    for (int k = 0; k < BM_TOPIC_COUNT; k++) {
        if (ev->cnt[k]) {
            wanted |= BM_TOPIC_BIT(k);
        } else if (ev->unwanted_ms[k] && now - ev->unwanted_ms[k] < ev->o.linger_ms) {
            wanted |= BM_TOPIC_BIT(k); /* a subscriber may be back at once: keep it a while */
            uint64_t left = ev->o.linger_ms - (now - ev->unwanted_ms[k]);
            if (!again || left < again)
                again = left;
        }
    }
    wanted &= ~TRACKER_TOPICS;
    for (size_t i = 0; i < ev->nx; i++) {
        const bm_node_t *n = bm_pool_node(ev->pool, i);
        /* a shadow's events never reach the cluster stream: no extra stream to it */
        reconcile_node(ev, &ev->x[i], n && n->shadow ? 0 : wanted);
    }
    if (again)
        bm_ev_schedule_reconcile(ev, again);
}

void bm_ev_schedule_reconcile(bm_events_t *ev, uint64_t ms)
{
    if (!ev->x || ev->shutting_down || ev->freed)
        return;
    if (bm_timer_active(ev->reconcile) && bm_timer_due_in(ev->reconcile) <= ms)
        return;
    bm_timer_start(ev->reconcile, ms);
}

void bm_events_node_conn(size_t node, bool up, void *ud)
{
    bm_events_t *ev = ud;
    if (ev->freed || !ev->x || node >= ev->nx)
        return;
    xnode_t *x = &ev->x[node];
    x->main_up = up;
    if (!up)
        return;
    /* the node is back (perhaps restarted or upgraded): give refused topics another
     * chance and skip the extra streams' backoff */
    for (int t = 0; t < BM_TOPIC_COUNT; t++)
        if (x->ps[t] == PS_UNSUPPORTED)
            x->ps[t] = PS_UNKNOWN;
    if (x->cur.s && !bm_nodestream_connected(x->cur.s))
        bm_nodestream_reconnect(x->cur.s);
    for (int t = 0; t < BM_TOPIC_COUNT; t++)
        if (x->probe[t].s)
            bm_nodestream_reconnect(x->probe[t].s);
    bm_ev_schedule_reconcile(ev, 0);
}

void bm_ev_stop_streams(bm_events_t *ev)
{
    for (size_t i = 0; ev->x && i < ev->nx; i++) {
        xnode_t *x = &ev->x[i];
        for (int t = 0; t < BM_TOPIC_COUNT; t++) {
            probe_stop(x, (bm_topic_t)t);
            x->ps[t] = PS_UNKNOWN;
        }
        xs_free(ev, &x->next);
        xs_free(ev, &x->cur);
    }
}

void bm_events_attach_nodes(bm_events_t *ev, bm_upstream_t *up, bm_pool_t *pool)
{
    if (ev->x || !up || !pool)
        return;
    size_t n = bm_pool_count(pool);
    ev->x = calloc(n ? n : 1, sizeof *ev->x);
    if (!ev->x) {
        bm_log(BM_LOG_ERROR, "events: no memory for the extra streams");
        return;
    }
    ev->nx = n;
    ev->up = up;
    ev->pool = pool;
    for (size_t i = 0; i < n; i++) {
        ev->x[i].ev = ev;
        ev->x[i].idx = i;
        ev->x[i].main_up = true; /* until the monitor says otherwise */
    }
}
