/* SPDX-License-Identifier: MIT */
/*
 * monitor: per node, one main event stream and a few small requests, all feeding the
 * head tracker; one slot timer for the whole cluster.
 *
 * - Streams. Each node has one nodestream for the main topics. A 400 is answered by the
 *   fallback ladder: head_v2 -> head first (older clients), then drop
 *   execution_payload_available; a node that refuses even that keeps its topics and is
 *   asked again at the longest backoff step. A node whose version changes (discovery
 *   re-reads it) climbs the ladder again. Up: the tracker hears bm_head_on_connect, the
 *   node's current head is fetched (nodes announce nothing until the next block) and the
 *   connection listeners run; discovery re-reads a node that reconnected (it may have
 *   been upgraded). Down: bm_head_on_disconnect, listeners. A stream waits for its
 *   response head at least two slots and its idle timeout: Lodestar sends the head only
 *   with its first event.
 * - Polled heads. Whenever a node's stream does not deliver its heads (not up yet, down,
 *   or the node has not followed the cluster head a quarter slot after it moved), its head
 *   is asked for (GET /eth/v1/beacon/headers/head; headpoll.h decides when: at the cluster
 *   head's move, a quarter slot after it, at the mid-slot point, at the slot start) and
 *   fed to the tracker like a head event. A failed poll of a node without a stream makes
 *   its head stale (no vote), as a dropped stream does.
 * - Probes. A head request still unanswered after bm_headpoll_probe_ms (a quarter slot, at
 *   most 1 s) makes the node unreachable (bm_pool_set_unresponsive) until its next HTTP
 *   answer: a stopped node is out of `ready` within the slot it stopped following, instead
 *   of when its lag passes maxHeadLag slots later.
 * - Requests. Header requests asked by the tracker, the head-at-connect request and the
 *   per-slot syncing poll are buffered transfers with a short timeout, kept on one list
 *   so that stop cancels them. Every header request is answered to the tracker exactly
 *   once (on_parent or on_parent_failed), also when it could not start.
 * - Time. One uv_timer fires at the next slot start, the tracker's next wake-up, the
 *   mid-slot or follow-up poll point or a probe's verdict, whichever comes first:
 *   bm_head_tick there (health re-evaluates from the tracker's tick), at a new slot the
 *   syncing polls and the Gloas and version checks, then the polls and verdicts due.
 *
 * Re-entrancy: tracker inputs are made from inside nodestream and upstream callbacks;
 * the tracker may call the fetch function from inside them, which only queues a
 * transfer (upstream applies starts after libcurl returns). Listeners run after the
 * tracker saw the event.
 */
#include "cluster/monitor.h"

#include <json-c/json.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/defaults.h"
#include "base/err.h"
#include "base/fork.h"
#include "base/json.h"
#include "base/list.h"
#include "base/log.h"
#include "base/url.h"
#include "cluster/headpoll.h"
#include "cluster/nodestream.h"
#include "http/sse.h"

#define REQ_MAX_BYTES (64u * 1024u) /* headers and syncing answers are a few hundred bytes */

typedef enum { REQ_HEADER = 0, REQ_HEAD, REQ_SYNCING } req_kind_t;

typedef struct mnode mnode_t;

typedef struct mreq {
    bm_link_t link; /* on the monitor's reqs */
    mnode_t *mn;
    req_kind_t kind;
    uint8_t root[32];
    bm_xfer_t *x;
    uint64_t t0_us;
} mreq_t;

struct mnode {
    bm_monitor_t *m;
    size_t idx;
    bm_node_t *node;
    bm_nodestream_t *stream;
    bool head_v2;          /* asking head_v2 (else head) */
    bool payload_topic;    /* execution_payload_available is in the list */
    bool payload_refused;  /* the node refused it: not asked again until its version changes */
    bool connected;        /* what the tracker and the listeners were told */
    bool syncing_busy;     /* a syncing poll is in flight */
    bool poll_busy;        /* a head request (GET .../headers/head) is in flight */
    uint64_t poll_slot;    /* slot of the last head request (UINT64_MAX: none) */
    uint64_t poll_sent_ms; /* wall time it was sent */
    bool poll_judged;      /* it went unanswered past the probe time: the pool was told */
    uint64_t poll_look_ms; /* probe time passed: end of the one more look (see judge_probes) */
    uint64_t last_stream_head_ms; /* wall time of the last head event from its stream */
    char *version;                /* discovery's version when the ladder was last reset */
    bm_monitor_node_info_t info;
};

struct bm_monitor {
    bm_clock_t *clk; /* time and the timer (m->clock is the chain's slot clock) */
    bm_upstream_t *up;
    bm_pool_t *pool;
    bm_discovery_t *disc;
    bm_head_t *head;
    bm_health_t *health;
    bm_monitor_opts_t opts;
    mnode_t *nodes;
    size_t n;
    bm_hdrs_t req_hdrs;
    bm_timer_t *timer;
    bool timer_closed;
    bool started;
    bool stopped;
    bool free_pending;
    bool clock_known;
    bm_slot_clock_t clock;
    bool want_payload;      /* the chain is in or near Gloas */
    uint64_t last_slot;     /* slot of the last per-slot round (UINT64_MAX: none) */
    uint64_t mid_slot;      /* slot of the last mid-slot poll round (UINT64_MAX: none) */
    uint64_t followed_ms;   /* the cluster head move (its since_ms) whose follow-up round ran */
    bool pregenesis_polled; /* the round just before genesis ran */
    uint64_t missing_since; /* first slot seen without a cluster head while the chain runs
                               (UINT64_MAX: not missing) */
    bool missing_logged;    /* ... and it was logged */
    bool listening;         /* registered as a tracker listener */
    uint64_t timer_at;      /* wall time the timer is armed for (0: not armed) */
    bm_link_t reqs;         /* requests in flight (mreq_t) */
    bm_str_t scratch;       /* one-line copies of multi-line event data */
    struct {
        bm_monitor_event_fn fn;
        void *ud;
    } ev_l[BM_MONITOR_MAX_LISTENERS];
    size_t n_ev_l;
    struct {
        bm_monitor_conn_fn fn;
        void *ud;
    } conn_l[BM_MONITOR_MAX_LISTENERS];
    size_t n_conn_l;
    bm_log_limit_t log_lim;
    bm_log_limit_t missing_lim; /* the missing cluster head: loud, once a minute */
};

void bm_monitor_opts_default(bm_monitor_opts_t *o)
{
    o->connect_timeout_ms = BM_DEFAULT_TIMEOUTS_CONNECT_MS;
    o->headers_timeout_ms = BM_DEFAULT_EVENTS_HEADERS_TIMEOUT_MS;
    o->request_timeout_ms = BM_DEFAULT_TIMEOUTS_READ_MS;
    o->idle_slots = 2;
    o->gloas_lead_epochs = 1;
}

/* ---- requests ------------------------------------------------------------------------- */

static void req_done(bm_xfer_t *x, const bm_xfer_result_t *res, void *ud);

/* Starts one buffered GET on the node. Returns the request or NULL (nothing started). */
static mreq_t *req_start(mnode_t *mn, req_kind_t kind, const char *path, const uint8_t *root)
{
    bm_monitor_t *m = mn->m;
    bm_str_t url = BM_STR_INIT;
    if (bm_url_join(&url, mn->node->url, path) != 0 || url.oom) {
        bm_str_dispose(&url);
        return NULL;
    }
    mreq_t *r = calloc(1, sizeof *r);
    if (!r) {
        bm_str_dispose(&url);
        return NULL;
    }
    r->mn = mn;
    r->kind = kind;
    if (root)
        memcpy(r->root, root, 32);
    r->t0_us = bm_clock_mono_now_us(m->clk);
    bm_xfer_req_t req = {.method = "GET",
                         .url = bm_str_data(&url),
                         .headers = &m->req_hdrs,
                         .extra = mn->node->extra.n ? &mn->node->extra : NULL,
                         .connect_timeout_ms = m->opts.connect_timeout_ms,
                         .timeout_ms = m->opts.request_timeout_ms,
                         .max_response_bytes = REQ_MAX_BYTES};
    bm_xfer_cbs_t cbs = {.on_done = req_done};
    r->x = bm_upstream_start(m->up, &req, &cbs, r);
    bm_str_dispose(&url);
    if (!r->x) {
        free(r);
        return NULL;
    }
    bm_list_push_front(&m->reqs, &r->link);
    return r;
}

/* The `data` object of a Beacon API answer (or of a versioned event: {"version","data"}). */
static json_object *data_of(json_object *doc)
{
    json_object *d = bm_json_get(doc, "/data");
    return d && json_object_is_type(d, json_type_object) ? d : NULL;
}

/* A header answer: root, slot, parent root, execution_optimistic. */
static int parse_header(const bm_buf_t *body, uint8_t root[32], uint64_t *slot, uint8_t parent[32],
                        bool *optimistic)
{
    json_object *doc = NULL;
    if (!body || bm_json_parse_buf(body, REQ_MAX_BYTES, &doc, NULL) != 0 || !doc)
        return BM_EPROTO;
    json_object *d = data_of(doc);
    int rc = BM_EPROTO;
    if (d && bm_json_get_root(d, "/root", root) == 0 &&
        bm_json_get_u64(d, "/header/message/slot", slot) == 0 &&
        bm_json_get_root(d, "/header/message/parent_root", parent) == 0) {
        *optimistic = false;
        bm_json_get_bool(doc, "/execution_optimistic", optimistic);
        rc = 0;
    }
    json_object_put(doc);
    return rc;
}

static void on_header_answer(mreq_t *r, const bm_xfer_result_t *res, uint64_t now)
{
    bm_monitor_t *m = r->mn->m;
    uint8_t root[32], parent[32];
    uint64_t slot;
    bool opt;
    if (res->err == 0 && res->status == 200 &&
        parse_header(res->body, root, &slot, parent, &opt) == 0 && memcmp(root, r->root, 32) == 0)
        bm_head_on_parent(m->head, r->mn->idx, r->root, slot, parent, now);
    else
        bm_head_on_parent_failed(m->head, r->mn->idx, r->root, now);
}

/* The node's current head (at connect, or polled because its stream does not deliver),
 * fed as a head event: nodes announce nothing until their next block, a node must not wait
 * a slot to count, and a node whose stream does not work must still be judged. */
static void on_head_answer(mreq_t *r, const bm_xfer_result_t *res, uint64_t now)
{
    mnode_t *mn = r->mn;
    bm_monitor_t *m = mn->m;
    bm_head_event_t ev = {
        .payload = BM_PAYLOAD_UNKNOWN, .topic = BM_HEAD_TOPIC_HEAD, .polled = true};
    uint8_t parent[32];
    mn->poll_busy = false;
    if (res->err || res->status != 200 ||
        parse_header(res->body, ev.root, &ev.slot, parent, &ev.optimistic) != 0) {
        mn->info.poll_failures++;
        bm_head_node_view_t v;
        /* without a stream, the polls are its only live word: its last head turns stale
         * (kept for lag, no vote), as with a dropped stream */
        if (!mn->connected && bm_head_node_view(m->head, mn->idx, &v) == 0 && v.connected)
            bm_head_on_disconnect(m->head, mn->idx, now);
        return;
    }
    mn->info.polled_heads++;
    bm_head_on_parent(m->head, mn->idx, ev.root, ev.slot, parent, now);
    /* The stream announced a head since the request went out: that one is newer, and the
     * answer must not take the node's head back (its parent link is knowledge all the same). */
    if (mn->last_stream_head_ms >= mn->poll_sent_ms)
        return;
    bm_head_on_head(m->head, mn->idx, &ev, now);
}

/* Asks the node for its head (one request at a time; `why` is static). */
static void poll_head(mnode_t *mn, const char *why, uint64_t now)
{
    bm_monitor_t *m = mn->m;
    if (mn->poll_busy || m->stopped)
        return;
    if (!req_start(mn, REQ_HEAD, "/eth/v1/beacon/headers/head", NULL))
        return;
    mn->poll_busy = true;
    mn->poll_judged = false;
    mn->poll_look_ms = 0;
    mn->poll_sent_ms = now;
    mn->poll_slot =
        m->clock_known && now >= m->clock.genesis_ms ? bm_slot_at(&m->clock, now) : UINT64_MAX;
    mn->info.head_polls++;
    mn->info.last_poll_ms = now;
    mn->info.last_poll_why = why;
    bm_log_limited(&m->log_lim, BM_LOG_DEBUG, "monitor: %s: asking its head (%s)", mn->node->id,
                   why);
}

/* Polls the node's head if headpoll says it is due at `moment`. */
static void maybe_poll(mnode_t *mn, bm_headpoll_moment_t moment, uint64_t now)
{
    bm_monitor_t *m = mn->m;
    bm_head_node_view_t v;
    if (m->stopped || !m->clock_known || bm_head_node_view(m->head, mn->idx, &v) != 0)
        return;
    bm_head_info_t ch;
    bool has_ch = bm_head_cluster(m->head, &ch);
    bm_headpoll_cluster_t c = {
        .clock = m->clock, .has_head = has_ch, .head_since_ms = has_ch ? ch.since_ms : 0};
    bm_headpoll_node_t n = {
        .stream_up = mn->connected,
        .has_head = v.has_head,
        /* not behind it: the cluster head, a descendant, or a later block whose relation the
         * tracker is still learning (the node announced its news, it is not stopped) */
        .at_cluster_head = v.relation == BM_HEAD_REL_EQUAL ||
                           v.relation == BM_HEAD_REL_DESCENDANT ||
                           (has_ch && v.has_head && v.slot > ch.slot),
        .poll_in_flight = mn->poll_busy,
        .polled_slot = mn->poll_slot,
        .polled_ms = mn->poll_sent_ms,
    };
    bm_headpoll_reason_t why = bm_headpoll_due(&c, &n, moment, now);
    if (why != BM_HEADPOLL_NO)
        poll_head(mn, bm_headpoll_reason_name(why), now);
}

static void poll_round(bm_monitor_t *m, bm_headpoll_moment_t moment, uint64_t now)
{
    for (size_t i = 0; i < m->n && !m->stopped; i++)
        maybe_poll(&m->nodes[i], moment, now);
}

/* When a head request in flight counts as unanswered (0: none waits for a verdict). */
static uint64_t probe_due(const bm_monitor_t *m, const mnode_t *mn)
{
    if (!mn->poll_busy || mn->poll_judged || !m->clock_known)
        return 0;
    uint64_t due = mn->poll_sent_ms + bm_headpoll_probe_ms(&m->clock);
    return mn->poll_look_ms > due ? mn->poll_look_ms : due;
}

/*
 * A head request unanswered for bm_headpoll_probe_ms: the node says nothing at all (it was
 * asked because its stream does not deliver, or because it did not follow the cluster head),
 * so it is not ready for new work until it answers again (the pool flips it back at its
 * next HTTP answer, this request's included). A stopped node otherwise stays `ready` until
 * its lag passes maxHeadLag, while requests queue on it.
 *
 * The verdict waits for one more look at the sockets: libuv runs due timers before it polls
 * for I/O, so after the process was not scheduled for a while the probe time is found passed
 * although the answer (a 503, a head) waits unread in the socket. When the probe time
 * passes, the timer is re-armed a little later (the loop polls in between and the answer,
 * if it is there, is read); only a request still unanswered then makes the node unreachable.
 */
static void judge_probes(bm_monitor_t *m, uint64_t now)
{
    if (!m->clock_known || now < m->clock.genesis_ms)
        return;
    for (size_t i = 0; i < m->n && !m->stopped; i++) {
        mnode_t *mn = &m->nodes[i];
        uint64_t due = probe_due(m, mn);
        if (!due || now < due)
            continue;
        if (mn->poll_look_ms <= mn->poll_sent_ms + bm_headpoll_probe_ms(&m->clock)) {
            mn->poll_look_ms = now + 1; /* arm_timer lands after it, past one poll */
            continue;
        }
        mn->poll_judged = true;
        mn->info.unanswered++;
        bm_pool_set_unresponsive(m->pool, mn->node,
                                 "no answer within %llu ms to a head request (asked: %s)",
                                 (unsigned long long)bm_headpoll_probe_ms(&m->clock),
                                 mn->info.last_poll_why ? mn->info.last_poll_why : "?");
    }
}

/* When the follow-up round of the cluster head's last move is due (0: none pending): nodes
 * with a stream that have not followed it by then are asked (headpoll's "behind"). */
static uint64_t follow_up_due(const bm_monitor_t *m)
{
    bm_head_info_t ch;
    if (!m->clock_known || !bm_head_cluster(m->head, &ch) || ch.since_ms == m->followed_ms)
        return 0;
    return bm_headpoll_behind_ms(&m->clock, ch.since_ms);
}

/* Runs the follow-up round and the probe verdicts that are due at `now`. */
static void follow_up(bm_monitor_t *m, uint64_t now)
{
    uint64_t fu = follow_up_due(m);
    if (fu && now >= fu) {
        bm_head_info_t ch;
        bm_head_cluster(m->head, &ch);
        m->followed_ms = ch.since_ms;
        poll_round(m, BM_HEADPOLL_FOLLOW_UP, now);
    }
    judge_probes(m, now);
}

static void on_syncing_answer(mreq_t *r, const bm_xfer_result_t *res, uint64_t now)
{
    mnode_t *mn = r->mn;
    bm_monitor_t *m = mn->m;
    mn->syncing_busy = false;
    if (res->err || res->status != 200)
        return; /* not an answer: the last one stands (the pool counted the failure) */
    json_object *doc = NULL;
    if (bm_json_parse_buf(res->body, REQ_MAX_BYTES, &doc, NULL) != 0 || !doc) {
        bm_log_limited(&m->log_lim, BM_LOG_DEBUG, "monitor: %s: unreadable syncing answer",
                       mn->node->id);
        return;
    }
    json_object *d = data_of(doc);
    bm_node_syncing_t s = {.known = true, .at_ms = now};
    bool ok = d && bm_json_get_u64(d, "/head_slot", &s.head_slot) == 0 &&
              bm_json_get_bool(d, "/is_syncing", &s.is_syncing) == 0;
    if (ok) {
        /* optional in older clients: absent means false / unknown */
        bm_json_get_u64(d, "/sync_distance", &s.sync_distance);
        bm_json_get_bool(d, "/is_optimistic", &s.is_optimistic);
        bm_json_get_bool(d, "/el_offline", &s.el_offline);
    }
    json_object_put(doc);
    if (!ok) {
        bm_log_limited(&m->log_lim, BM_LOG_DEBUG, "monitor: %s: syncing answer lacks fields",
                       mn->node->id);
        return;
    }
    bm_health_set_syncing(m->health, mn->node, &s, now);
}

static void arm_timer(bm_monitor_t *m);

static void req_done(bm_xfer_t *x, const bm_xfer_result_t *res, void *ud)
{
    mreq_t *r = ud;
    mnode_t *mn = r->mn;
    bm_monitor_t *m = mn->m;
    (void)x;
    bm_link_unlink(&r->link);
    bm_outcome_t oc = res->status == 0     ? BM_OUTCOME_NET_ERROR
                      : res->status >= 500 ? BM_OUTCOME_HTTP_5XX
                                           : BM_OUTCOME_OK;
    bm_pool_record(m->pool, mn->node, oc, res->err == BM_ECONNREFUSED,
                   bm_clock_mono_now_us(m->clk) - r->t0_us, res->err ? res->detail : NULL);
    uint64_t now = bm_clock_wall_now(m->clk);
    switch (r->kind) {
    case REQ_HEADER:
        on_header_answer(r, res, now);
        break;
    case REQ_HEAD:
        on_head_answer(r, res, now);
        break;
    case REQ_SYNCING:
        on_syncing_answer(r, res, now);
        break;
    }
    free(r);
    arm_timer(m);
}

/* The tracker asks for a header. Answered exactly once, at once when nothing can start. */
static void fetch_header(const uint8_t root[32], uint64_t slot, size_t node, void *ud)
{
    bm_monitor_t *m = ud;
    (void)slot;
    if (node >= m->n || m->stopped) {
        bm_head_on_parent_failed(m->head, node, root, bm_clock_wall_now(m->clk));
        return;
    }
    mnode_t *mn = &m->nodes[node];
    char path[40 + BM_ROOT_HEX_LEN];
    char hex[BM_ROOT_HEX_LEN + 1];
    bm_root_to_hex(root, hex);
    snprintf(path, sizeof path, "/eth/v1/beacon/headers/%s", hex);
    if (!req_start(mn, REQ_HEADER, path, root)) {
        bm_head_on_parent_failed(m->head, node, root, bm_clock_wall_now(m->clk));
        return;
    }
    mn->info.header_fetches++;
}

/* ---- events --------------------------------------------------------------------------- */

static bool topic_is(const char *t, size_t len, const char *z)
{
    return strlen(z) == len && memcmp(t, z, len) == 0;
}

/* Feeds one parsed event to the tracker. Returns false when its fields are unusable. */
static bool feed(mnode_t *mn, const char *topic, size_t tl, json_object *doc, const char *raw,
                 size_t raw_len, uint64_t now)
{
    bm_monitor_t *m = mn->m;
    /* head_v2 (and other versioned topics) wrap the fields: {"version","data":{...}} */
    json_object *d = bm_json_get(doc, "/slot") ? doc : data_of(doc);
    if (!d)
        return topic_is(topic, tl, "finalized_checkpoint") ? true : false;
    bool v2 = topic_is(topic, tl, "head_v2");
    if (v2 || topic_is(topic, tl, "head")) {
        bm_head_event_t ev = {.topic = v2 ? BM_HEAD_TOPIC_HEAD_V2 : BM_HEAD_TOPIC_HEAD,
                              .raw = raw,
                              .raw_len = raw_len};
        if (bm_json_get_u64(d, "/slot", &ev.slot) != 0 ||
            bm_json_get_root(d, "/block", ev.root) != 0)
            return false;
        bm_json_get_bool(d, "/execution_optimistic", &ev.optimistic);
        const char *ps = bm_json_get_str(d, "/payload_status");
        ev.payload = ps ? bm_payload_status_parse(ps, strlen(ps)) : BM_PAYLOAD_UNKNOWN;
        mn->last_stream_head_ms = now;
        return bm_head_on_head(m->head, mn->idx, &ev, now) == 0;
    }
    if (topic_is(topic, tl, "block")) {
        uint64_t slot;
        uint8_t root[32];
        if (bm_json_get_u64(d, "/slot", &slot) != 0 || bm_json_get_root(d, "/block", root) != 0)
            return false;
        return bm_head_on_block(m->head, mn->idx, slot, root, now) == 0;
    }
    if (topic_is(topic, tl, "chain_reorg")) {
        bm_head_reorg_event_t ev = {.raw = raw, .raw_len = raw_len};
        if (bm_json_get_u64(d, "/slot", &ev.slot) != 0 ||
            bm_json_get_root(d, "/old_head_block", ev.old_head) != 0 ||
            bm_json_get_root(d, "/new_head_block", ev.new_head) != 0)
            return false;
        bm_json_get_u64(d, "/depth", &ev.depth);
        bm_json_get_bool(d, "/execution_optimistic", &ev.optimistic);
        return bm_head_on_reorg(m->head, mn->idx, &ev, now) == 0;
    }
    if (topic_is(topic, tl, "execution_payload_available")) {
        uint64_t slot;
        uint8_t root[32];
        if (bm_json_get_u64(d, "/slot", &slot) != 0 ||
            bm_json_get_root(d, "/block_root", root) != 0)
            return false;
        return bm_head_on_payload_available(m->head, mn->idx, slot, root, now) == 0;
    }
    return true; /* finalized_checkpoint and anything else: for the listeners only */
}

static void on_event(bm_nodestream_t *s, const char *topic, size_t tl, const char *data, size_t dl,
                     void *ud)
{
    mnode_t *mn = ud;
    bm_monitor_t *m = mn->m;
    (void)s;
    uint64_t now = bm_clock_wall_now(m->clk);
    mn->info.events++;
    mn->info.last_event_ms = now;
    /* the listeners get one line: nodes send one already, compact the rare other case */
    const char *line = data;
    size_t len = dl;
    if (memchr(data, '\n', dl) || memchr(data, '\r', dl)) {
        bm_str_clear(&m->scratch);
        if (bm_json_compact(data, dl, &m->scratch, NULL) != 0 || m->scratch.oom) {
            mn->info.bad_events++;
            return;
        }
        line = bm_str_data(&m->scratch);
        len = bm_str_len(&m->scratch);
    }
    json_object *doc = NULL;
    if (bm_json_parse(line, len, BM_SSE_DEFAULT_MAX_DATA, &doc, NULL) != 0 || !doc ||
        !json_object_is_type(doc, json_type_object)) {
        json_object_put(doc);
        mn->info.bad_events++;
        bm_log_limited(&m->log_lim, BM_LOG_DEBUG, "monitor: %s: unreadable %.*s event",
                       mn->node->id, (int)(tl < 64 ? tl : 64), topic);
        return;
    }
    bool ok = feed(mn, topic, tl, doc, line, len, now);
    if (!ok) {
        json_object_put(doc);
        mn->info.bad_events++;
        bm_log_limited(&m->log_lim, BM_LOG_DEBUG, "monitor: %s: %.*s event lacks fields",
                       mn->node->id, (int)(tl < 64 ? tl : 64), topic);
        return;
    }
    bm_node_event_t e = {.topic = topic, .data = line, .len = len, .doc = doc};
    for (size_t i = 0; i < m->n_ev_l && !m->stopped; i++)
        m->ev_l[i].fn(mn->idx, &e, m->ev_l[i].ud);
    json_object_put(doc);
    arm_timer(m);
}

/* ---- connection ----------------------------------------------------------------------- */

static void tell_conn(bm_monitor_t *m, mnode_t *mn, bool up)
{
    for (size_t i = 0; i < m->n_conn_l && !m->stopped; i++)
        m->conn_l[i].fn(mn->idx, up, m->conn_l[i].ud);
}

static void went_down(mnode_t *mn)
{
    bm_monitor_t *m = mn->m;
    if (!mn->connected)
        return;
    mn->connected = false;
    mn->info.connected = false;
    mn->info.up_since_ms = 0;
    bm_head_on_disconnect(m->head, mn->idx, bm_clock_wall_now(m->clk));
    tell_conn(m, mn, false);
}

static void on_up(bm_nodestream_t *s, void *ud)
{
    mnode_t *mn = ud;
    bm_monitor_t *m = mn->m;
    (void)s;
    uint64_t now = bm_clock_wall_now(m->clk);
    bool reconnect = mn->info.connects > 0;
    mn->info.connects++;
    mn->connected = true;
    mn->info.connected = true;
    mn->info.up_since_ms = now;
    bm_log(reconnect ? BM_LOG_INFO : BM_LOG_DEBUG, "monitor: %s: event stream %s (%s)",
           mn->node->id, reconnect ? "reconnected" : "connected", mn->head_v2 ? "head_v2" : "head");
    bm_head_on_connect(m->head, mn->idx, now);
    poll_head(mn, "connect", now);
    if (reconnect)
        bm_discovery_refresh(m->disc, mn->node); /* it may have been upgraded */
    tell_conn(m, mn, true);
    arm_timer(m);
}

static bool step_down(mnode_t *mn, bool names_v2, bool names_payload, const char *why);

static void on_down(bm_nodestream_t *s, const bm_nodestream_failure_t *f, void *ud)
{
    mnode_t *mn = ud;
    (void)s;
    mn->info.failures++;
    mn->info.last_err = f->err;
    mn->info.last_status = f->status;
    went_down(mn);
    /* Not a byte for the whole head wait (at least two slots) from a node that answers its
     * other requests: Lodestar before 1.10 answers a topic it does not know (head_v2, the
     * comma form) by never answering at all, where newer clients say 400. Treated as a
     * refusal naming nothing: the next rung of the ladder. A node that merely had nothing
     * to say for two slots loses head_v2 until its version changes; head carries the same
     * head (the cluster stream synthesises head_v2 from it). */
    if (f->head_timeout && mn->node->reachable && !mn->m->stopped)
        step_down(mn, false, false, "never answered (no byte within the head wait)");
}

/* The topic list for the node's place on the fallback ladder. */
static size_t topics_for(const mnode_t *mn, bool want_payload, const char **out)
{
    size_t n = 0;
    out[n++] = mn->head_v2 ? "head_v2" : "head";
    out[n++] = "block";
    out[n++] = "finalized_checkpoint";
    out[n++] = "chain_reorg";
    if (want_payload && !mn->payload_refused)
        out[n++] = "execution_payload_available";
    return n;
}

/* Re-subscribes when the node's topic list changed. A deliberate switch is a disconnect
 * for the tracker and the listeners (the new stream's up says connected again). */
static void update_topics(mnode_t *mn)
{
    bm_monitor_t *m = mn->m;
    const char *t[8];
    size_t n = topics_for(mn, m->want_payload, t);
    bool payload = n == 5;
    bool same = n == bm_nodestream_topic_count(mn->stream);
    for (size_t i = 0; same && i < n; i++)
        same = strcmp(t[i], bm_nodestream_topic(mn->stream, i)) == 0;
    if (same)
        return;
    if (bm_nodestream_set_topics(mn->stream, t, n) != 0)
        return;
    mn->payload_topic = payload;
    mn->info.payload_topic = payload;
    mn->info.head_v2 = mn->head_v2;
    went_down(mn);
}

/*
 * One rung down the topic ladder: head_v2 -> head first (older clients), then drop
 * execution_payload_available. `names_v2` / `names_payload`: the refusal named that topic
 * (a refusal naming nothing takes the next rung). False when nothing is left to drop.
 */
static bool step_down(mnode_t *mn, bool names_v2, bool names_payload, const char *why)
{
    if (mn->head_v2 && (names_v2 || !names_payload)) {
        mn->head_v2 = false;
        bm_log(BM_LOG_INFO, "monitor: %s: head_v2 %s, falling back to head", mn->node->id, why);
    } else if (mn->payload_topic && !mn->payload_refused) {
        mn->payload_refused = true;
        bm_log(BM_LOG_INFO, "monitor: %s: execution_payload_available %s, dropped", mn->node->id,
               why);
    } else {
        return false;
    }
    update_topics(mn);
    return true;
}

static void on_rejected(bm_nodestream_t *s, int status, const char *body, size_t len, void *ud)
{
    mnode_t *mn = ud;
    (void)s;
    mn->info.last_status = status;
    mn->info.last_err = BM_EPROTO;
    /* which topic? the message names it ("Invalid topic: head_v2"); unnamed: next rung */
    bool names_v2 = memmem(body, len, "head_v2", 7) != NULL;
    bool names_payload = memmem(body, len, "execution_payload_available", 27) != NULL;
    char why[32];
    snprintf(why, sizeof why, "refused (%d)", status);
    if (!step_down(mn, names_v2, names_payload, why))
        bm_log_limited(&mn->m->log_lim, BM_LOG_WARN,
                       "monitor: %s: event topics refused (%d): %.*s; retrying later", mn->node->id,
                       status, (int)(len < 200 ? len : 200), body);
    /* nothing left to drop: the stream retries at the longest step */
}

/* ---- time ----------------------------------------------------------------------------- */

static void on_timer(bm_timer_t *t, void *ud);

/* Does any node depend on the mid-slot poll (its stream is not up, or its head unknown)? */
static bool mid_slot_wanted(const bm_monitor_t *m)
{
    for (size_t i = 0; i < m->n; i++) {
        bm_head_node_view_t v;
        if (!m->nodes[i].connected || (bm_head_node_view(m->head, i, &v) == 0 && !v.has_head))
            return true;
    }
    return false;
}

/*
 * Arms the timer for the next slot start, the mid-slot poll point (when a node needs it)
 * or the tracker's wake-up, whichever is first; at once when the current slot's round has
 * not run yet. A timer already due is never pushed back: an event that arrives just after
 * a slot start (with the timer due but not yet run in this loop turn) must not skip that
 * slot's round.
 */
static void arm_timer(bm_monitor_t *m)
{
    if (m->stopped || !m->started || !m->clock_known)
        return;
    uint64_t now = bm_clock_wall_now(m->clk);
    uint64_t at;
    if (now < m->clock.genesis_ms) {
        at = m->clock.genesis_ms;
        uint64_t lead = bm_headpoll_pregenesis_ms(&m->clock);
        uint64_t pre = m->clock.genesis_ms > lead ? m->clock.genesis_ms - lead : 0;
        if (!m->pregenesis_polled && mid_slot_wanted(m))
            at = pre > now ? pre : now;
    } else {
        uint64_t slot = bm_slot_at(&m->clock, now);
        at = slot != m->last_slot ? now : bm_slot_start_ms(&m->clock, slot + 1);
        uint64_t mid = bm_headpoll_mid_slot_ms(&m->clock, slot);
        if (slot != m->mid_slot && mid < at && mid_slot_wanted(m))
            at = mid > now ? mid : now;
    }
    uint64_t fu = follow_up_due(m);
    if (fu && fu < at)
        at = fu > now ? fu : now;
    for (size_t i = 0; i < m->n; i++) {
        uint64_t pd = probe_due(m, &m->nodes[i]);
        if (pd && pd < at)
            at = pd > now ? pd : now;
    }
    uint64_t w = bm_head_next_wakeup_ms(m->head);
    /* A wake-up already due is served 1 ms from now, never at 0 ms: libuv 1.44 runs a timer
     * re-armed at 0 ms from its own callback again in the same pass, against a loop time
     * that does not advance, without polling, so a wake-up that stayed due (a tracker rule
     * with nothing to do at it) would freeze the whole process. */
    if (w && w <= now)
        w = now + 1;
    if (w && w < at)
        at = w;
    if (m->timer_at && m->timer_at <= at && bm_timer_active(m->timer))
        return; /* armed for earlier (or due now) already */
    m->timer_at = at;
    /* +1: land after the instant, never just before it (ms rounding); and 1 ms past it
     * also when it is due now: whichever callback arms the timer, it lands at the same
     * moment (a 0 ms timer made the moment depend on which callback came first). */
    uint64_t delay = at > now ? at - now + 1 : 1;
    bm_timer_start(m->timer, delay);
}

static bool near_gloas(const bm_monitor_t *m, const bm_chain_info_t *c, uint64_t now)
{
    uint64_t ge = c->fork_epoch[BM_FORK_GLOAS];
    if (!c->known || ge == BM_FAR_FUTURE_EPOCH)
        return false;
    uint64_t epoch = bm_epoch_of_slot(&c->clock, bm_slot_at(&c->clock, now));
    return epoch + m->opts.gloas_lead_epochs >= ge;
}

/* Discovery re-read a node with another version: climb the fallback ladder again. */
static void check_version(mnode_t *mn)
{
    const char *v = mn->node->version;
    if (!v || (mn->version && strcmp(mn->version, v) == 0))
        return;
    bool changed = mn->version != NULL;
    free(mn->version);
    mn->version = strdup(v);
    if (changed && (!mn->head_v2 || mn->payload_refused)) {
        bm_log(BM_LOG_INFO, "monitor: %s: new version %s, asking every topic again", mn->node->id,
               v);
        mn->head_v2 = true;
        mn->payload_refused = false;
        update_topics(mn);
    }
}

/* Subscribes every node to execution_payload_available once Gloas is near (or back). */
static void refresh_payload(bm_monitor_t *m, const bm_chain_info_t *c, uint64_t now)
{
    bool want = near_gloas(m, c, now);
    if (want == m->want_payload)
        return;
    m->want_payload = want;
    if (want)
        bm_log(BM_LOG_INFO, "monitor: Gloas is near: subscribing to execution_payload_available");
    for (size_t i = 0; i < m->n; i++)
        update_topics(&m->nodes[i]);
}

/* The cluster head came back after it was reported missing. */
static void head_back(bm_monitor_t *m, uint64_t slot)
{
    if (m->missing_since != UINT64_MAX && m->missing_logged) {
        bm_head_info_t ch;
        bm_head_cluster(m->head, &ch);
        bm_log(BM_LOG_INFO,
               "monitor: cluster head known again (slot %llu) after %llu slot(s) without one",
               (unsigned long long)ch.slot, (unsigned long long)(slot - m->missing_since));
    }
    m->missing_since = UINT64_MAX;
    m->missing_logged = false;
}

/* At each slot start: says loudly (once a minute) when the chain runs without a cluster
 * head for a whole slot: nothing served can be checked for freshness then. */
static void check_missing(bm_monitor_t *m, uint64_t slot)
{
    bm_head_info_t ch;
    if (bm_head_cluster(m->head, &ch)) {
        head_back(m, slot);
        return;
    }
    if (m->missing_since == UINT64_MAX)
        m->missing_since = slot;
    if (slot == m->missing_since)
        return; /* at genesis and at start-up, the first heads are on their way */
    size_t known = 0;
    for (size_t i = 0; i < m->n; i++) {
        bm_head_node_view_t v;
        known += bm_head_node_view(m->head, i, &v) == 0 && v.has_head && !v.stale;
    }
    m->missing_logged = true;
    bm_log_limited(&m->missing_lim, BM_LOG_WARN,
                   "monitor: NO CLUSTER HEAD while the chain runs (slot %llu, since slot %llu): "
                   "no answer can be checked for freshness; live heads known from %zu of %zu "
                   "node(s), quorum %u",
                   (unsigned long long)slot, (unsigned long long)m->missing_since, known, m->n,
                   bm_head_quorum(m->head));
}

static void per_slot(bm_monitor_t *m, uint64_t now, uint64_t slot)
{
    refresh_payload(m, bm_discovery_chain(m->disc), now);
    for (size_t i = 0; i < m->n && !m->stopped; i++) {
        mnode_t *mn = &m->nodes[i];
        check_version(mn);
        if (mn->syncing_busy)
            continue; /* a hung node gets one poll at a time */
        if (req_start(mn, REQ_SYNCING, "/eth/v1/node/syncing", NULL)) {
            mn->syncing_busy = true;
            mn->info.syncing_polls++;
        }
    }
    poll_round(m, BM_HEADPOLL_SLOT_START, now);
    check_missing(m, slot);
}

static void on_timer(bm_timer_t *t, void *ud)
{
    bm_monitor_t *m = ud;
    (void)t;
    m->timer_at = 0;
    if (m->stopped)
        return;
    uint64_t now = bm_clock_wall_now(m->clk);
    bm_head_tick(m->head, now); /* health re-evaluates every node from the tracker's tick */
    uint64_t slot = now < m->clock.genesis_ms ? UINT64_MAX : bm_slot_at(&m->clock, now);
    if (slot != UINT64_MAX && slot != m->last_slot) {
        m->last_slot = slot;
        per_slot(m, now, slot);
    }
    if (slot == UINT64_MAX && !m->pregenesis_polled &&
        now + bm_headpoll_pregenesis_ms(&m->clock) >= m->clock.genesis_ms) {
        m->pregenesis_polled = true; /* the nodes' genesis blocks, to count from genesis on */
        poll_round(m, BM_HEADPOLL_SLOT_START, now);
    }
    if (slot != UINT64_MAX && slot != m->mid_slot && !m->stopped &&
        now >= bm_headpoll_mid_slot_ms(&m->clock, slot)) {
        m->mid_slot = slot;
        poll_round(m, BM_HEADPOLL_MID_SLOT, now);
    }
    if (!m->stopped)
        follow_up(m, now);
    arm_timer(m);
}

/*
 * How long a stream may wait for its response head: events.headersTimeout, but at least
 * two slots (bm_nodestream_head_wait_ms) and at least the idle timeout, so that a stream
 * that has said nothing yet is judged like a stream that went quiet. `slot_ms` 0: unknown.
 */
static uint32_t head_wait(const bm_monitor_t *m, uint32_t slot_ms)
{
    uint64_t idle = (uint64_t)m->opts.idle_slots * (slot_ms ? slot_ms : 12000u);
    uint32_t w = bm_nodestream_head_wait_ms(m->opts.headers_timeout_ms, slot_ms);
    return idle > w ? (idle > UINT32_MAX ? UINT32_MAX : (uint32_t)idle) : w;
}

/* The cluster head moved: nodes whose stream does not deliver are asked now (they most
 * likely hold the block that moved it). */
static void on_cluster_move(const bm_head_change_t *c, void *ud)
{
    bm_monitor_t *m = ud;
    if (m->stopped || !m->clock_known)
        return;
    if (c->at_ms >= m->clock.genesis_ms)
        head_back(m, bm_slot_at(&m->clock, c->at_ms));
    poll_round(m, BM_HEADPOLL_CLUSTER_MOVED, c->at_ms);
}

static void on_chain(const bm_chain_info_t *c, void *ud)
{
    bm_monitor_t *m = ud;
    if (!c->known || m->stopped)
        return;
    uint64_t now = bm_clock_wall_now(m->clk);
    if (!m->clock_known || memcmp(&m->clock, &c->clock, sizeof m->clock) != 0) {
        m->clock = c->clock;
        m->clock_known = true;
        bm_head_set_clock(m->head, &c->clock, now);
        uint64_t idle = (uint64_t)m->opts.idle_slots * c->clock.slot_ms;
        if (idle > UINT32_MAX)
            idle = UINT32_MAX;
        uint32_t wait = head_wait(m, c->clock.slot_ms);
        if (m->opts.headers_timeout_ms && m->opts.headers_timeout_ms < wait)
            bm_log(BM_LOG_INFO,
                   "monitor: events.headersTimeout (%u ms) is below two slots or the streams' "
                   "idle time; event streams wait %u ms for their response head (a node may send "
                   "it only with its first event)",
                   m->opts.headers_timeout_ms, wait);
        for (size_t i = 0; i < m->n; i++) {
            bm_nodestream_set_idle_timeout(m->nodes[i].stream, (uint32_t)idle);
            bm_nodestream_set_headers_timeout(m->nodes[i].stream, wait);
        }
    }
    refresh_payload(m, c, now);
    m->timer_at = 0; /* the clock may have moved: re-arm from scratch */
    arm_timer(m);
}

/* ---- lifetime ------------------------------------------------------------------------- */

bm_monitor_t *bm_monitor_new(bm_clock_t *clk, bm_upstream_t *up, bm_pool_t *pool,
                             bm_discovery_t *disc, bm_head_t *head, bm_health_t *health,
                             const bm_monitor_opts_t *opts)
{
    size_t n = pool ? bm_pool_count(pool) : 0;
    if (!clk || !up || !pool || !disc || !head || !health || n == 0 || bm_head_node_count(head) < n)
        return NULL;
    bm_monitor_t *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->clk = clk;
    bm_link_init(&m->reqs);
    m->up = up;
    m->pool = pool;
    m->disc = disc;
    m->head = head;
    m->health = health;
    bm_monitor_opts_default(&m->opts);
    if (opts)
        m->opts = *opts;
    if (m->opts.idle_slots < 2)
        m->opts.idle_slots = 2;
    m->last_slot = UINT64_MAX;
    m->mid_slot = UINT64_MAX;
    m->missing_since = UINT64_MAX;
    m->missing_lim.window_ms = 60000;
    m->missing_lim.burst = 1;
    bm_hdrs_init(&m->req_hdrs);
    m->nodes = calloc(n, sizeof *m->nodes);
    if (!m->nodes || bm_hdrs_add_z(&m->req_hdrs, "Accept", "application/json") != 0)
        goto fail;
    m->n = n;
    bm_nodestream_opts_t so;
    bm_nodestream_opts_default(&so);
    so.connect_timeout_ms = m->opts.connect_timeout_ms;
    so.headers_timeout_ms = head_wait(m, 0); /* set from the slot once the chain is known */
    bm_nodestream_cbs_t cbs = {
        .on_event = on_event, .on_up = on_up, .on_down = on_down, .on_rejected = on_rejected};
    for (size_t i = 0; i < n; i++) {
        mnode_t *mn = &m->nodes[i];
        mn->m = m;
        mn->idx = i;
        mn->node = bm_pool_node(pool, i);
        mn->head_v2 = true;
        mn->info.head_v2 = true;
        mn->poll_slot = UINT64_MAX;
        const char *t[8];
        size_t nt = topics_for(mn, false, t);
        mn->stream =
            bm_nodestream_new(clk, up, mn->node->url, &mn->node->extra, t, nt, &so, &cbs, mn);
        if (!mn->stream)
            goto fail;
    }
    m->timer = bm_timer_new(clk, on_timer, m);
    if (!m->timer)
        goto fail;
    return m;
fail:
    for (size_t i = 0; i < n && m->nodes; i++)
        bm_nodestream_free(m->nodes[i].stream);
    free(m->nodes);
    bm_hdrs_dispose(&m->req_hdrs);
    free(m);
    return NULL;
}

int bm_monitor_start(bm_monitor_t *m)
{
    if (m->stopped)
        return BM_ECLOSED;
    if (m->started)
        return BM_EINVAL;
    m->started = true;
    bm_head_set_fetch(m->head, fetch_header, m);
    const bm_head_listener_t l = {.head = on_cluster_move};
    int lrc = bm_head_listen(m->head, &l, m);
    if (lrc)
        return lrc;
    m->listening = true;
    bm_discovery_on_chain(m->disc, on_chain, m);
    const bm_chain_info_t *c = bm_discovery_chain(m->disc);
    if (c->known)
        on_chain(c, m); /* the topic list is settled before the streams start */
    for (size_t i = 0; i < m->n; i++) {
        int rc = bm_nodestream_start(m->nodes[i].stream);
        if (rc)
            return rc;
    }
    return 0;
}

static void on_timer_closed(void *ud)
{
    bm_monitor_t *m = ud;
    m->timer_closed = true;
    if (m->free_pending)
        bm_monitor_free(m);
}

void bm_monitor_stop(bm_monitor_t *m)
{
    if (!m || m->stopped)
        return;
    m->stopped = true;
    if (m->started) {
        bm_head_set_fetch(m->head, NULL, NULL);
        bm_discovery_off_chain(m->disc, m);
    }
    if (m->listening) {
        bm_head_unlisten(m->head, m);
        m->listening = false;
    }
    for (size_t i = 0; i < m->n; i++) {
        bm_nodestream_free(m->nodes[i].stream);
        m->nodes[i].stream = NULL;
    }
    while (!bm_list_empty(&m->reqs)) {
        mreq_t *r = bm_list_first(&m->reqs, mreq_t, link);
        bm_link_unlink(&r->link);
        bm_upstream_cancel(r->x); /* unanswered header requests: the tracker goes too */
        free(r);
    }
    bm_timer_close(m->timer, on_timer_closed, m);
}

void bm_monitor_free(bm_monitor_t *m)
{
    if (!m)
        return;
    if (!m->stopped)
        bm_monitor_stop(m);
    if (!m->timer_closed) {
        m->free_pending = true; /* finished in the close callback */
        return;
    }
    for (size_t i = 0; i < m->n; i++)
        free(m->nodes[i].version);
    free(m->nodes);
    bm_hdrs_dispose(&m->req_hdrs);
    bm_str_dispose(&m->scratch);
    free(m);
}

int bm_monitor_on_event(bm_monitor_t *m, bm_monitor_event_fn fn, void *ud)
{
    if (!fn || m->n_ev_l >= BM_MONITOR_MAX_LISTENERS)
        return BM_ENOMEM;
    m->ev_l[m->n_ev_l].fn = fn;
    m->ev_l[m->n_ev_l].ud = ud;
    m->n_ev_l++;
    return 0;
}

int bm_monitor_on_connection(bm_monitor_t *m, bm_monitor_conn_fn fn, void *ud)
{
    if (!fn || m->n_conn_l >= BM_MONITOR_MAX_LISTENERS)
        return BM_ENOMEM;
    m->conn_l[m->n_conn_l].fn = fn;
    m->conn_l[m->n_conn_l].ud = ud;
    m->n_conn_l++;
    return 0;
}

bm_head_t *bm_monitor_head(bm_monitor_t *m)
{
    return m->head;
}

int bm_monitor_node_info(const bm_monitor_t *m, size_t node, bm_monitor_node_info_t *out)
{
    if (!m || node >= m->n || !out)
        return BM_EINVAL;
    const mnode_t *mn = &m->nodes[node];
    *out = mn->info;
    if (!out->last_poll_why)
        out->last_poll_why = "";
    if (mn->stream) {
        bm_nodestream_stats_t st = bm_nodestream_stats(mn->stream);
        out->connects = st.connects;
        out->failures = st.failures;
        out->last_err = st.last_err;
        out->last_status = st.last_status;
        out->stream_state = (int)bm_nodestream_state(mn->stream);
        out->waiting_since_ms = st.attempt_since_ms;
    }
    bm_head_node_view_t v;
    out->head_polled = bm_head_node_view(m->head, node, &v) == 0 && v.has_head && v.polled;
    return 0;
}

bool bm_monitor_head_missing(const bm_monitor_t *m, uint64_t now_ms, uint64_t *since_slot)
{
    bm_head_info_t ch;
    if (!m || !m->clock_known || now_ms < m->clock.genesis_ms || bm_head_cluster(m->head, &ch))
        return false;
    if (since_slot)
        *since_slot =
            m->missing_since != UINT64_MAX ? m->missing_since : bm_slot_at(&m->clock, now_ms);
    return true;
}
