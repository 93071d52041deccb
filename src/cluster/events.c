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
#include "cluster/nodestream.h"

/* ---- topics ------------------------------------------------------------------------- */

static const char *const TOPIC_NAMES[BM_TOPIC_COUNT] = {
    [BM_TOPIC_HEAD] = "head",
    [BM_TOPIC_HEAD_V2] = "head_v2",
    [BM_TOPIC_BLOCK] = "block",
    [BM_TOPIC_BLOCK_GOSSIP] = "block_gossip",
    [BM_TOPIC_ATTESTATION] = "attestation",
    [BM_TOPIC_SINGLE_ATTESTATION] = "single_attestation",
    [BM_TOPIC_VOLUNTARY_EXIT] = "voluntary_exit",
    [BM_TOPIC_BLS_TO_EXECUTION_CHANGE] = "bls_to_execution_change",
    [BM_TOPIC_PROPOSER_SLASHING] = "proposer_slashing",
    [BM_TOPIC_ATTESTER_SLASHING] = "attester_slashing",
    [BM_TOPIC_FINALIZED_CHECKPOINT] = "finalized_checkpoint",
    [BM_TOPIC_CHAIN_REORG] = "chain_reorg",
    [BM_TOPIC_CONTRIBUTION_AND_PROOF] = "contribution_and_proof",
    [BM_TOPIC_LIGHT_CLIENT_FINALITY_UPDATE] = "light_client_finality_update",
    [BM_TOPIC_LIGHT_CLIENT_OPTIMISTIC_UPDATE] = "light_client_optimistic_update",
    [BM_TOPIC_PAYLOAD_ATTRIBUTES] = "payload_attributes",
    [BM_TOPIC_DATA_COLUMN_SIDECAR] = "data_column_sidecar",
    [BM_TOPIC_EXECUTION_PAYLOAD] = "execution_payload",
    [BM_TOPIC_EXECUTION_PAYLOAD_GOSSIP] = "execution_payload_gossip",
    [BM_TOPIC_EXECUTION_PAYLOAD_AVAILABLE] = "execution_payload_available",
    [BM_TOPIC_EXECUTION_PAYLOAD_BID] = "execution_payload_bid",
    [BM_TOPIC_PAYLOAD_ATTESTATION_MESSAGE] = "payload_attestation_message",
    [BM_TOPIC_FAST_CONFIRMATION] = "fast_confirmation",
    [BM_TOPIC_PROPOSER_PREFERENCES] = "proposer_preferences",
};

/* Decided by the tracker: never forwarded from a node. */
#define TRACKER_TOPICS                                                                             \
    (BM_TOPIC_BIT(BM_TOPIC_HEAD) | BM_TOPIC_BIT(BM_TOPIC_HEAD_V2) |                                \
     BM_TOPIC_BIT(BM_TOPIC_CHAIN_REORG))

/*
 * Carried by every node's main stream (the monitor's), besides the tracker topics. The
 * monitor adds execution_payload_available only near Gloas, but no node emits it before.
 */
#define MAIN_TOPICS                                                                                \
    (TRACKER_TOPICS | BM_TOPIC_BIT(BM_TOPIC_BLOCK) | BM_TOPIC_BIT(BM_TOPIC_FINALIZED_CHECKPOINT) | \
     BM_TOPIC_BIT(BM_TOPIC_EXECUTION_PAYLOAD_AVAILABLE))

/*
 * Topics that state what a node's chain looks like (imported blocks, finality, payloads,
 * fork choice): taken only from nodes the tracker trusts (not forked, optimistic or
 * time-discrepant). Gossip topics only say that a message passed validation and come
 * from any node.
 */
#define CHAIN_TOPICS                                                                               \
    (BM_TOPIC_BIT(BM_TOPIC_BLOCK) | BM_TOPIC_BIT(BM_TOPIC_FINALIZED_CHECKPOINT) |                  \
     BM_TOPIC_BIT(BM_TOPIC_EXECUTION_PAYLOAD) |                                                    \
     BM_TOPIC_BIT(BM_TOPIC_EXECUTION_PAYLOAD_AVAILABLE) |                                          \
     BM_TOPIC_BIT(BM_TOPIC_PAYLOAD_ATTRIBUTES) | BM_TOPIC_BIT(BM_TOPIC_FAST_CONFIRMATION) |        \
     BM_TOPIC_BIT(BM_TOPIC_LIGHT_CLIENT_FINALITY_UPDATE) |                                         \
     BM_TOPIC_BIT(BM_TOPIC_LIGHT_CLIENT_OPTIMISTIC_UPDATE))

const char *bm_topic_name(bm_topic_t t)
{
    return (unsigned)t < BM_TOPIC_COUNT ? TOPIC_NAMES[t] : "";
}

int bm_topic_parse(const char *s, size_t n, bm_topic_t *out)
{
    if (!s)
        return BM_EINVAL;
    for (int i = 0; i < BM_TOPIC_COUNT; i++)
        if (strlen(TOPIC_NAMES[i]) == n && memcmp(TOPIC_NAMES[i], s, n) == 0) {
            if (out)
                *out = (bm_topic_t)i;
            return 0;
        }
    return BM_EINVAL;
}

/* ---- the query string ------------------------------------------------------------------ */

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Percent-decodes s[0..n) into out (room for n + 1); a malformed escape stays as is. */
static size_t pct_decode(const char *s, size_t n, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int h, l;
        if (s[i] == '%' && i + 2 < n && (h = hexval(s[i + 1])) >= 0 &&
            (l = hexval(s[i + 2])) >= 0) {
            out[o++] = (char)(h * 16 + l);
            i += 2;
        } else {
            out[o++] = s[i];
        }
    }
    out[o] = '\0';
    return o;
}

static void set_bad(char *bad, size_t cap, const char *s, size_t n)
{
    if (!bad || !cap)
        return;
    size_t k = n < cap - 1 ? n : cap - 1;
    memcpy(bad, s, k);
    bad[k] = '\0';
}

int bm_events_parse_topics(const char *query, size_t len, bm_topic_mask_t *mask, char *bad,
                           size_t bad_cap)
{
    if (bad && bad_cap)
        bad[0] = '\0';
    bm_topic_mask_t m = 0;
    bool named = false;
    char *dec = NULL;
    size_t i = 0;
    while (query && i < len) {
        size_t j = i;
        while (j < len && query[j] != '&')
            j++;
        const char *p = query + i, *eq = memchr(p, '=', j - i);
        size_t nlen = eq ? (size_t)(eq - p) : j - i;
        i = j + 1;
        if (!(nlen == 6 && memcmp(p, "topics", 6) == 0))
            continue;
        named = true;
        const char *v = eq ? eq + 1 : p + nlen;
        size_t vlen = (size_t)(query + j - v);
        char *d = realloc(dec, vlen + 1);
        if (!d) {
            free(dec);
            return BM_ENOMEM;
        }
        dec = d;
        size_t dlen = pct_decode(v, vlen, dec);
        /* the comma form inside one value, items trimmed of spaces */
        size_t a = 0;
        for (;;) {
            size_t b = a;
            while (b < dlen && dec[b] != ',')
                b++;
            size_t s = a, e = b;
            while (s < e && dec[s] == ' ')
                s++;
            while (e > s && dec[e - 1] == ' ')
                e--;
            bm_topic_t t;
            if (bm_topic_parse(dec + s, e - s, &t) != 0) {
                set_bad(bad, bad_cap, dec + s, e - s);
                free(dec);
                return BM_EINVAL;
            }
            m |= BM_TOPIC_BIT(t);
            if (b >= dlen)
                break;
            a = b + 1;
        }
    }
    free(dec);
    if (!named)
        return BM_ENOTFOUND;
    *mask = m;
    return 0;
}

/* ---- serialisation ----------------------------------------------------------------------- */

bm_buf_t *bm_events_serialise(const char *topic, const char *data, size_t len)
{
    bm_str_t s = BM_STR_INIT;
    bm_str_reserve(&s, len + strlen(topic) + 16);
    bm_str_puts(&s, "event: ");
    bm_str_puts(&s, topic);
    bm_str_puts(&s, "\ndata: ");
    if (bm_json_compact(data, len, &s, NULL) != 0) {
        bm_str_dispose(&s);
        return NULL;
    }
    bm_str_puts(&s, "\n\n");
    return bm_str_finish(&s);
}

/* ---- the dedup window ---------------------------------------------------------------------
 * A ring of the last `cap` keys in arrival order and an open-addressing set over them
 * (linear probing, deletion by backward shift), so that lookup, insert and eviction of
 * the oldest are O(1) and memory is fixed. A key is a 64-bit keyed hash of topic and
 * canonical data; 0 marks an empty slot (a hash of 0 is stored as 1).
 */
typedef struct dedup {
    uint64_t *ring;
    uint32_t cap, n, pos;
    uint64_t *tab;
    uint32_t tmask;
} dedup_t;

static int dedup_init(dedup_t *d, uint32_t cap)
{
    memset(d, 0, sizeof *d);
    uint32_t ts = 16;
    while (ts < 2 * cap)
        ts <<= 1;
    d->ring = calloc(cap, sizeof *d->ring);
    d->tab = calloc(ts, sizeof *d->tab);
    if (!d->ring || !d->tab) {
        free(d->ring);
        free(d->tab);
        return BM_ENOMEM;
    }
    d->cap = cap;
    d->tmask = ts - 1;
    return 0;
}

static void dedup_dispose(dedup_t *d)
{
    free(d->ring);
    free(d->tab);
    memset(d, 0, sizeof *d);
}

static bool dedup_has(const dedup_t *d, uint64_t h)
{
    for (uint32_t i = (uint32_t)h & d->tmask; d->tab[i]; i = (i + 1) & d->tmask)
        if (d->tab[i] == h)
            return true;
    return false;
}

static void dedup_remove(dedup_t *d, uint64_t h)
{
    uint32_t i = (uint32_t)h & d->tmask;
    while (d->tab[i] && d->tab[i] != h)
        i = (i + 1) & d->tmask;
    if (!d->tab[i])
        return;
    uint32_t j = i;
    for (;;) {
        j = (j + 1) & d->tmask;
        if (!d->tab[j])
            break;
        uint32_t k = (uint32_t)d->tab[j] & d->tmask; /* home of the entry at j */
        /* it may move to i only if its home is not cyclically within (i, j] */
        bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (stays)
            continue;
        d->tab[i] = d->tab[j];
        i = j;
    }
    d->tab[i] = 0;
}

/* Inserts h (not present). Evicts the oldest key when the window is full. */
static void dedup_add(dedup_t *d, uint64_t h)
{
    if (d->n == d->cap) {
        dedup_remove(d, d->ring[d->pos]);
        d->n--;
    }
    d->ring[d->pos] = h;
    d->pos = (d->pos + 1) % d->cap;
    d->n++;
    uint32_t i = (uint32_t)h & d->tmask;
    while (d->tab[i])
        i = (i + 1) & d->tmask;
    d->tab[i] = h;
}

/* ---- the module ------------------------------------------------------------------------------ */

typedef struct sub {
    struct sub *prev, *next;
    bm_events_t *ev;
    bm_req_t *req;
    bm_topic_mask_t mask;
    uint64_t id;
    size_t unchecked; /* bytes written since the kernel's queue was last looked at */
} sub_t;

/* What a head event says, from either topic's form. */
typedef struct headf {
    uint64_t slot;
    uint8_t root[32];
    char block[BM_ROOT_HEX_LEN + 1];
    char state[BM_ROOT_HEX_LEN + 1];
    bool epoch_transition;
    bool has_deps;
    char dep_cur_epoch[BM_ROOT_HEX_LEN + 1];  /* head_v2 current_epoch_dependent_root =
                                                 head previous_duty_dependent_root */
    char dep_next_epoch[BM_ROOT_HEX_LEN + 1]; /* head_v2 next_epoch_dependent_root =
                                                 head current_duty_dependent_root */
    char version[33];                         /* head_v2 only ("" otherwise) */
    bm_payload_status_t payload;              /* head_v2 only */
} headf_t;

/* A cluster head whose data no node gave yet: emitted when a trusted node's head arrives. */
typedef struct pend_head {
    bool valid;
    bm_head_change_t c; /* buffers: only raw_reorg is held */
} pend_head_t;

#define HOLD_MAX 64   /* events held for coalescing at most */
#define STATE_RING 32 /* recent cluster heads' state roots, for chain_reorg's old_head_state */

/* Probe states of one topic on one node. */
enum { PS_UNKNOWN = 0, PS_PROBING, PS_OK, PS_UNSUPPORTED };

typedef struct xnode xnode_t;

typedef struct probe {
    xnode_t *x;
    bm_topic_t t;
    bm_nodestream_t *s;
    uint64_t hto; /* header timeouts seen so far */
} probe_t;

typedef struct xstream {
    bm_nodestream_t *s;
    bm_topic_mask_t mask;
    uint64_t hto; /* header timeouts seen so far */
} xstream_t;

/* One node's extra stream: `cur` serves, `next` replaces it once up (make before break). */
struct xnode {
    bm_events_t *ev;
    size_t idx;
    uint8_t ps[BM_TOPIC_COUNT];
    probe_t probe[BM_TOPIC_COUNT];
    bm_topic_mask_t logged; /* unsupported topics already logged */
    xstream_t cur, next;
    bool main_up;
    uint64_t last_reprobe_ms;
};

struct bm_events {
    uv_loop_t *loop;
    bm_events_opts_t o;
    bm_events_stats_t st;
    uint8_t hkey[16]; /* per-process key of the dedup hash */

    sub_t *subs; /* list head */
    uint64_t next_id;
    uint32_t cnt[BM_TOPIC_COUNT];         /* subscribers per topic */
    uint64_t unwanted_ms[BM_TOPIC_COUNT]; /* when cnt fell to 0 (linger) */
    bm_buf_t *keepalive_buf;
    size_t check_step; /* see sub_write */
    struct {
        bm_topic_t t;
        bm_buf_t *b;
    } held[HOLD_MAX]; /* see emit */
    uint32_t nheld;
    uv_timer_t hold;
    uv_timer_t keepalive;
    uv_timer_t reconcile;
    int open_handles;
    bool shutting_down;
    bool freed;

    bm_head_t *head;
    bm_upstream_t *up;
    bm_pool_t *pool;
    bm_events_tap_fn tap; /* sees every event the stream emits (the response cache) */
    void *tap_ud;
    const bm_discovery_t *disc; /* the chain, read when needed */
    bool chain_known;
    bm_chain_info_t chain; /* set directly (tests), when no discovery is attached */

    dedup_t dd;

    /* the cluster head as emitted */
    bool cur_valid;
    headf_t cur;
    bool cur_full_sent;
    struct {
        uint8_t root[32];
        char state[BM_ROOT_HEX_LEN + 1];
    } states[STATE_RING];
    uint32_t states_pos;
    pend_head_t pend;

    xnode_t *x;
    size_t nx;

    bm_log_limit_t lim_drop;
    bm_log_limit_t lim_bad;
};

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

static void schedule_reconcile(bm_events_t *ev, uint64_t ms);

static void sub_unlink(bm_events_t *ev, sub_t *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        ev->subs = s->next;
    if (s->next)
        s->next->prev = s->prev;
    s->prev = s->next = NULL;
    bool extra_gone = false;
    uint64_t now = uv_now(ev->loop);
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
        schedule_reconcile(ev, ev->o.linger_ms);
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
    for (sub_t *s = ev->subs, *nx; s; s = nx) {
        nx = s->next;
        if (s->mask & bit)
            sub_write(ev, s, b, false);
    }
}

/* Fans out the held events, in their order. */
static void release_held(bm_events_t *ev)
{
    uv_timer_stop(&ev->hold);
    for (uint32_t i = 0; i < ev->nheld; i++) {
        fan_out(ev, ev->held[i].t, ev->held[i].b);
        bm_buf_unref(ev->held[i].b);
    }
    ev->nheld = 0;
}

static void on_hold(uv_timer_t *t)
{
    release_held(t->data);
}

/*
 * Serialises data under topic t and fans it out (nothing when nobody wants t). With many
 * subscribers, every round of writes costs one system call per subscriber and the last
 * one waits for all the others; a node's block, gossip and payload events arrive a
 * header request before the head they announce, so they are held up to coalesce_ms and
 * leave together with that head. Head, head_v2 and chain_reorg are never held.
 */
static void emit(bm_events_t *ev, bm_topic_t t, const char *data, size_t len)
{
    if (ev->tap)
        ev->tap(t, data, len, ev->tap_ud);
    if (!ev->cnt[t])
        return;
    bm_buf_t *b = bm_events_serialise(TOPIC_NAMES[t], data, len);
    if (!b) {
        ev->st.bad_events++;
        bm_log_limited(&ev->lim_bad, BM_LOG_WARN, "events: %s data could not be serialised",
                       TOPIC_NAMES[t]);
        return;
    }
    if (ev->st.subscribers >= ev->o.coalesce_min_subscribers &&
        !(TRACKER_TOPICS & BM_TOPIC_BIT(t)) && ev->nheld < HOLD_MAX) {
        /* many subscribers: hold it briefly, so that it leaves with the head that usually
         * follows (one write per subscriber instead of two) */
        ev->held[ev->nheld].t = t;
        ev->held[ev->nheld++].b = b;
        if (!uv_is_active((uv_handle_t *)&ev->hold))
            uv_timer_start(&ev->hold, on_hold, ev->o.coalesce_ms, 0);
        return;
    }
    release_held(ev);
    fan_out(ev, t, b);
    bm_buf_unref(b);
}

static void on_keepalive(uv_timer_t *t)
{
    bm_events_t *ev = t->data;
    release_held(ev);
    for (sub_t *s = ev->subs, *nx; s; s = nx) {
        nx = s->next;
        sub_write(ev, s, ev->keepalive_buf, true);
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
    s->next = ev->subs;
    if (ev->subs)
        ev->subs->prev = s;
    ev->subs = s;
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
                bm_str_puts(&names, TOPIC_NAMES[t]);
            }
        bm_log(BM_LOG_DEBUG, "events: subscriber %" PRIu64 " (%s): %s", s->id, bm_req_peer(req),
               bm_str_data(&names));
        bm_str_dispose(&names);
    }
    if (extra_new)
        schedule_reconcile(ev, 0);
}

int bm_events_register(bm_events_t *ev, bm_router_t *r)
{
    return bm_router_add(r, "GET", "/eth/v1/events", bm_events_route, ev);
}

/* ---- the cluster head ------------------------------------------------------------------------ */

static bool get_root_str(struct json_object *o, const char *ptr, char out[BM_ROOT_HEX_LEN + 1])
{
    const char *s = bm_json_get_str(o, ptr);
    uint8_t r[32];
    if (!s || bm_hex_to_root(s, r) != 0)
        return false;
    bm_root_to_hex(r, out);
    return true;
}

/*
 * Reads a head (v2: wrapped) event's data into f and checks that it is the cluster head
 * `root` at `slot` and not optimistic. False when it is unusable.
 */
static bool parse_head(const bm_buf_t *raw, bool v2, uint64_t slot, const uint8_t root[32],
                       headf_t *f)
{
    struct json_object *o = NULL;
    if (!raw || bm_json_parse_buf(raw, BM_HEAD_RAW_MAX, &o, NULL) != 0 || !o)
        return false;
    memset(f, 0, sizeof *f);
    bool ok = false;
    char p[64];
    const char *pre = v2 ? "/data" : "";
    bool opt = false;
    snprintf(p, sizeof p, "%s/execution_optimistic", pre);
    int orc = bm_json_get_bool(o, p, &opt);
    snprintf(p, sizeof p, "%s/slot", pre);
    if (bm_json_get_u64(o, p, &f->slot) != 0 || f->slot != slot)
        goto out;
    snprintf(p, sizeof p, "%s/block", pre);
    if (bm_json_get_root(o, p, f->root) != 0 || memcmp(f->root, root, 32) != 0)
        goto out;
    if (orc == BM_EINVAL || opt)
        goto out; /* never an optimistic copy */
    bm_root_to_hex(f->root, f->block);
    snprintf(p, sizeof p, "%s/state", pre);
    if (!get_root_str(o, p, f->state))
        goto out;
    snprintf(p, sizeof p, "%s/epoch_transition", pre);
    if (bm_json_get_bool(o, p, &f->epoch_transition) != 0)
        f->epoch_transition = false;
    if (v2) {
        const char *ver = bm_json_get_str(o, "/version");
        bm_fork_t fk;
        if (!ver || strlen(ver) >= sizeof f->version || bm_fork_parse(ver, &fk) != 0)
            goto out;
        snprintf(f->version, sizeof f->version, "%s", ver);
        const char *ps = bm_json_get_str(o, "/data/payload_status");
        f->payload = ps ? bm_payload_status_parse(ps, strlen(ps)) : BM_PAYLOAD_UNKNOWN;
        f->has_deps = get_root_str(o, "/data/current_epoch_dependent_root", f->dep_cur_epoch) &&
                      get_root_str(o, "/data/next_epoch_dependent_root", f->dep_next_epoch);
    } else {
        f->has_deps = get_root_str(o, "/previous_duty_dependent_root", f->dep_cur_epoch) &&
                      get_root_str(o, "/current_duty_dependent_root", f->dep_next_epoch);
    }
    ok = true;
out:
    json_object_put(o);
    return ok;
}

static void synth_head_v1(const headf_t *f, bm_str_t *s)
{
    bm_str_printf(s,
                  "{\"slot\":\"%" PRIu64 "\",\"block\":\"%s\",\"state\":\"%s\","
                  "\"epoch_transition\":%s,\"previous_duty_dependent_root\":\"%s\","
                  "\"current_duty_dependent_root\":\"%s\",\"execution_optimistic\":false}",
                  f->slot, f->block, f->state, f->epoch_transition ? "true" : "false",
                  f->dep_cur_epoch, f->dep_next_epoch);
}

static void synth_head_v2(const headf_t *f, const char *version, bool full, bm_str_t *s)
{
    bm_str_printf(s,
                  "{\"version\":\"%s\",\"data\":{\"slot\":\"%" PRIu64 "\",\"block\":\"%s\","
                  "\"state\":\"%s\",\"payload_status\":\"%s\",\"epoch_transition\":%s,"
                  "\"current_epoch_dependent_root\":\"%s\",\"next_epoch_dependent_root\":\"%s\","
                  "\"execution_optimistic\":false}}",
                  version, f->slot, f->block, f->state, full ? "full" : "empty",
                  f->epoch_transition ? "true" : "false", f->dep_cur_epoch, f->dep_next_epoch);
}

/* The chain: discovery's when known, else the one set directly, else NULL. */
static const bm_chain_info_t *chain_of(const bm_events_t *ev)
{
    if (ev->disc) {
        const bm_chain_info_t *c = bm_discovery_chain(ev->disc);
        if (c && c->known)
            return c;
    }
    return ev->chain_known ? &ev->chain : NULL;
}

/* The fork name for a synthesised head_v2 at f's slot: its own, the chain's, or NULL. */
static const char *version_for(const bm_events_t *ev, const headf_t *f)
{
    if (f->version[0])
        return f->version;
    const bm_chain_info_t *c = chain_of(ev);
    return c ? bm_fork_name(bm_chain_fork_at_slot(c, f->slot)) : NULL;
}

static bool pre_gloas(const bm_events_t *ev, const headf_t *f)
{
    bm_fork_t fk;
    if (f->version[0] && bm_fork_parse(f->version, &fk) == 0)
        return fk < BM_FORK_GLOAS;
    const bm_chain_info_t *c = chain_of(ev);
    return c && bm_chain_fork_at_slot(c, f->slot) < BM_FORK_GLOAS;
}

static void remember_state(bm_events_t *ev, const headf_t *f)
{
    uint32_t i = ev->states_pos++ % STATE_RING;
    memcpy(ev->states[i].root, f->root, 32);
    memcpy(ev->states[i].state, f->state, sizeof f->state);
}

static const char *state_of(const bm_events_t *ev, const uint8_t root[32])
{
    for (uint32_t k = 0; k < STATE_RING && k < ev->states_pos; k++) {
        uint32_t i = (ev->states_pos - 1 - k) % STATE_RING;
        if (memcmp(ev->states[i].root, root, 32) == 0)
            return ev->states[i].state;
    }
    return NULL;
}

/* Emits a buffer's JSON data as is (one line). */
static void emit_raw(bm_events_t *ev, bm_topic_t t, const bm_buf_t *b)
{
    emit(ev, t, b->data, b->len);
}

static void emit_str(bm_events_t *ev, bm_topic_t t, bm_str_t *s)
{
    if (!s->oom)
        emit(ev, t, bm_str_data(s), bm_str_len(s));
    bm_str_dispose(s);
}

/* chain_reorg for a re-org move: the matching node data, else synthesised. */
static void emit_reorg(bm_events_t *ev, const bm_head_change_t *c, const headf_t *nf)
{
    ev->st.reorgs++;
    if (!ev->cnt[BM_TOPIC_CHAIN_REORG])
        return;
    struct json_object *o = NULL;
    bool have_raw =
        c->raw_reorg && bm_json_parse_buf(c->raw_reorg, BM_HEAD_RAW_MAX, &o, NULL) == 0 && o;
    uint8_t rold[32], rnew[32];
    bool opt = false;
    bool raw_new = have_raw && bm_json_get_root(o, "/new_head_block", rnew) == 0 &&
                   memcmp(rnew, c->root, 32) == 0 &&
                   bm_json_get_bool(o, "/execution_optimistic", &opt) != BM_EINVAL && !opt;
    bool raw_old = raw_new && bm_json_get_root(o, "/old_head_block", rold) == 0 &&
                   memcmp(rold, c->old_root, 32) == 0;
    if (raw_old) {
        uint64_t v;
        if (bm_json_get_u64(o, "/slot", &v) == 0 && v == c->slot) {
            emit_raw(ev, BM_TOPIC_CHAIN_REORG, c->raw_reorg);
            json_object_put(o);
            return;
        }
    }
    /* synthesised from the cluster's view */
    char old_state[BM_ROOT_HEX_LEN + 1] = "";
    const char *os = state_of(ev, c->old_root);
    if (os)
        snprintf(old_state, sizeof old_state, "%s", os);
    else if (raw_old && !get_root_str(o, "/old_head_state", old_state))
        old_state[0] = '\0';
    uint64_t depth = 0;
    if (c->depth_known)
        depth = c->depth;
    else if (!(raw_new && bm_json_get_u64(o, "/depth", &depth) == 0))
        depth = c->old_slot >= c->slot ? c->old_slot - c->slot + 1 : 1; /* a lower bound */
    uint64_t epoch = 0;
    bool epoch_ok = false;
    const bm_chain_info_t *ch = chain_of(ev);
    if (ch && bm_slot_clock_valid(&ch->clock)) {
        epoch = bm_epoch_of_slot(&ch->clock, c->slot);
        epoch_ok = true;
    } else if (raw_new && bm_json_get_u64(o, "/epoch", &epoch) == 0) {
        epoch_ok = true;
    }
    json_object_put(o);
    if (!old_state[0] || !epoch_ok) {
        bm_log_limited(&ev->lim_bad, BM_LOG_WARN,
                       "events: chain_reorg to slot %" PRIu64 " not sent: %s unknown", c->slot,
                       !old_state[0] ? "the old head's state" : "the epoch");
        return;
    }
    char oldb[BM_ROOT_HEX_LEN + 1];
    bm_root_to_hex(c->old_root, oldb);
    bm_str_t s = BM_STR_INIT;
    bm_str_printf(&s,
                  "{\"slot\":\"%" PRIu64 "\",\"depth\":\"%" PRIu64 "\",\"old_head_block\":\"%s\","
                  "\"new_head_block\":\"%s\",\"old_head_state\":\"%s\",\"new_head_state\":\"%s\","
                  "\"epoch\":\"%" PRIu64 "\",\"execution_optimistic\":false}",
                  c->slot, depth, oldb, nf->block, old_state, nf->state, epoch);
    emit_str(ev, BM_TOPIC_CHAIN_REORG, &s);
}

static void pend_clear(bm_events_t *ev)
{
    if (ev->pend.valid)
        bm_buf_unref(ev->pend.c.raw_reorg);
    memset(&ev->pend, 0, sizeof ev->pend);
}

/* A cluster head move: chain_reorg (re-org only), head, head_v2. */
static void emit_change(bm_events_t *ev, const bm_head_change_t *c)
{
    headf_t v1, v2, vf;
    bool h1 = parse_head(c->raw[BM_HEAD_TOPIC_HEAD], false, c->slot, c->root, &v1);
    bool h2 = parse_head(c->raw[BM_HEAD_TOPIC_HEAD_V2], true, c->slot, c->root, &v2);
    bool hf = parse_head(c->raw_full, true, c->slot, c->root, &vf) && vf.payload == BM_PAYLOAD_FULL;
    if (!h1 && !h2 && !hf) {
        /* no usable node data yet: wait for a trusted node's head event for this root */
        pend_clear(ev);
        ev->pend.valid = true;
        ev->pend.c = *c;
        for (int k = 0; k < BM_HEAD_TOPIC_COUNT; k++)
            ev->pend.c.raw[k] = NULL;
        ev->pend.c.raw_full = NULL;
        ev->pend.c.raw_reorg = bm_buf_ref(c->raw_reorg);
        bm_log(BM_LOG_DEBUG, "events: cluster head slot %" PRIu64 " waits for node data", c->slot);
        return;
    }
    const headf_t *f = h2 ? &v2 : h1 ? &v1 : &vf;
    if (c->move == BM_HEAD_MOVE_REORG && c->has_old)
        emit_reorg(ev, c, f);
    ev->st.heads++;

    if (ev->cnt[BM_TOPIC_HEAD]) {
        if (h1) {
            emit_raw(ev, BM_TOPIC_HEAD, c->raw[BM_HEAD_TOPIC_HEAD]);
        } else if (f->has_deps) {
            bm_str_t s = BM_STR_INIT;
            synth_head_v1(f, &s);
            emit_str(ev, BM_TOPIC_HEAD, &s);
        }
    }
    bool full = c->payload_full || (hf && !h2);
    if (h2 && v2.payload == BM_PAYLOAD_FULL)
        full = true;
    if (!h2 && !hf && pre_gloas(ev, f))
        full = true; /* before Gloas the payload travels inside the block */
    if (ev->cnt[BM_TOPIC_HEAD_V2]) {
        if (full && hf) {
            emit_raw(ev, BM_TOPIC_HEAD_V2, c->raw_full);
        } else if (h2 && (v2.payload == BM_PAYLOAD_FULL) == full) {
            emit_raw(ev, BM_TOPIC_HEAD_V2, c->raw[BM_HEAD_TOPIC_HEAD_V2]);
        } else {
            const char *ver = version_for(ev, f);
            if (ver && f->has_deps) {
                bm_str_t s = BM_STR_INIT;
                synth_head_v2(f, ver, full, &s);
                emit_str(ev, BM_TOPIC_HEAD_V2, &s);
            }
        }
    }
    ev->cur = *f;
    if (!ev->cur.version[0]) {
        const char *ver = version_for(ev, f);
        if (ver)
            snprintf(ev->cur.version, sizeof ev->cur.version, "%s", ver);
    }
    ev->cur_valid = true;
    ev->cur_full_sent = full;
    remember_state(ev, f);
}

static void on_head_change(const bm_head_change_t *c, void *ud)
{
    bm_events_t *ev = ud;
    if (ev->pend.valid) {
        ev->st.heads_unsent++;
        bm_log(BM_LOG_INFO,
               "events: cluster head slot %" PRIu64 " not sent: no node gave its data in time",
               ev->pend.c.slot);
        pend_clear(ev);
    }
    emit_change(ev, c);
}

static void on_head_payload(const bm_head_payload_t *p, void *ud)
{
    bm_events_t *ev = ud;
    if (ev->pend.valid && memcmp(ev->pend.c.root, p->root, 32) == 0) {
        ev->pend.c.payload_full = true;
        return;
    }
    if (!ev->cur_valid || memcmp(ev->cur.root, p->root, 32) != 0 || ev->cur_full_sent)
        return;
    ev->cur_full_sent = true;
    ev->st.payload_heads++;
    if (!ev->cnt[BM_TOPIC_HEAD_V2])
        return;
    headf_t f;
    if (p->raw && parse_head(p->raw, true, p->slot, p->root, &f) && f.payload == BM_PAYLOAD_FULL) {
        emit_raw(ev, BM_TOPIC_HEAD_V2, p->raw);
        return;
    }
    if (!ev->cur.has_deps || !ev->cur.version[0])
        return;
    bm_str_t s = BM_STR_INIT;
    synth_head_v2(&ev->cur, ev->cur.version, true, &s);
    emit_str(ev, BM_TOPIC_HEAD_V2, &s);
}

/* A trusted node's head event for the pending cluster head: emit it now. */
static void pend_try(bm_events_t *ev, bool v2, const char *data, size_t len)
{
    bm_buf_t *b = bm_buf_copy(data, len);
    if (!b)
        return;
    headf_t f;
    if (parse_head(b, v2, ev->pend.c.slot, ev->pend.c.root, &f)) {
        bm_head_change_t c = ev->pend.c;
        c.raw[v2 ? BM_HEAD_TOPIC_HEAD_V2 : BM_HEAD_TOPIC_HEAD] = b;
        if (v2 && f.payload == BM_PAYLOAD_FULL)
            c.raw_full = b;
        ev->pend.c.raw_reorg = NULL; /* c holds it now */
        pend_clear(ev);
        emit_change(ev, &c);
        bm_buf_unref(c.raw_reorg);
    }
    bm_buf_unref(b);
}

void bm_events_set_tap(bm_events_t *ev, bm_events_tap_fn fn, void *ud)
{
    ev->tap = fn;
    ev->tap_ud = ud;
}

/* ---- node events --------------------------------------------------------------------------- */

static bool node_trusted(const bm_events_t *ev, size_t node)
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

void bm_events_node_event(size_t node, const char *topic, const char *data, size_t len, void *ud)
{
    bm_events_t *ev = ud;
    if (ev->freed || !topic || !data)
        return;
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
        if (ev->pend.valid && node_trusted(ev, node))
            pend_try(ev, t == BM_TOPIC_HEAD_V2, data, len);
        return;
    }
    /* Every other event goes through the window, wanted or not: a copy a slow node sends
     * after a subscriber arrived is still a copy of what the cluster already had. */
    if (t == BM_TOPIC_CHAIN_REORG)
        return;
    struct json_object *o = NULL;
    if (bm_json_parse(data, len, 0, &o, NULL) != 0 || !o) {
        ev->st.bad_events++;
        bm_log_limited(&ev->lim_bad, BM_LOG_WARN, "events: node %zu sent invalid %s data", node,
                       TOPIC_NAMES[t]);
        return;
    }
    if (says_optimistic(o) || ((CHAIN_TOPICS & BM_TOPIC_BIT(t)) && !node_trusted(ev, node))) {
        ev->st.untrusted++;
        json_object_put(o);
        return;
    }
    /* the key: topic and data hashed under a per-topic variant of the process key */
    uint8_t key[16];
    memcpy(key, ev->hkey, 16);
    key[0] ^= (uint8_t)(t + 1);
    uint64_t h = 0;
    int rc = bm_json_canonical_hash(o, key, &h);
    json_object_put(o);
    if (rc != 0) {
        ev->st.bad_events++;
        return;
    }
    if (h == 0)
        h = 1;
    if (dedup_has(&ev->dd, h)) {
        ev->st.duplicates++;
        return;
    }
    dedup_add(&ev->dd, h);
    emit(ev, t, data, len);
}

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
               n ? n->id : "?", TOPIC_NAMES[t], why);
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
    schedule_reconcile(x->ev, 0);
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
    schedule_reconcile(x->ev, 0);
}

/* How long a probe waits for its response head: events.headersTimeout, never less than
 * two slots (a node may send its head only with its first event). */
static uint32_t head_wait(const bm_events_t *ev)
{
    const bm_chain_info_t *c = chain_of(ev);
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
        schedule_reconcile(x->ev, 0);
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
            names[k++] = TOPIC_NAMES[t];
    bm_nodestream_opts_t o;
    bm_nodestream_opts_default(&o);
    o.connect_timeout_ms = ev->o.connect_timeout_ms;
    o.headers_timeout_ms = head_wait(ev);
    o.idle_timeout_ms = ev->o.extra_idle_ms;
    if (!probe && o.headers_timeout_ms < o.idle_timeout_ms)
        o.headers_timeout_ms = o.idle_timeout_ms;
    bm_nodestream_t *s = bm_nodestream_new(ev->loop, ev->up, n->url, n->extra.n ? &n->extra : NULL,
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
    bm_events_node_event(x->idx, topic, data, data_len, x->ev);
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
    uint64_t now = uv_now(ev->loop);
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
    schedule_reconcile(ev, 0);
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

static void on_reconcile(uv_timer_t *t)
{
    bm_events_t *ev = t->data;
    if (!ev->x || ev->shutting_down)
        return;
    uint64_t now = uv_now(ev->loop), again = 0;
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
        schedule_reconcile(ev, again);
}

static void schedule_reconcile(bm_events_t *ev, uint64_t ms)
{
    if (!ev->x || ev->shutting_down || ev->freed)
        return;
    if (uv_is_active((uv_handle_t *)&ev->reconcile) && uv_timer_get_due_in(&ev->reconcile) <= ms)
        return;
    uv_timer_start(&ev->reconcile, on_reconcile, ms, 0);
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
    schedule_reconcile(ev, 0);
}

static void stop_streams(bm_events_t *ev)
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

/* ---- wiring and lifetime ----------------------------------------------------------------- */

bm_events_t *bm_events_new(uv_loop_t *loop, const bm_events_opts_t *opts)
{
    if (!loop)
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
    ev->loop = loop;
    ev->check_step = ev->o.subscriber_max_pending / 8;
    if (ev->check_step > 64 * 1024)
        ev->check_step = 64 * 1024;
    ev->lim_drop.window_ms = 10000;
    ev->lim_drop.burst = 10;
    ev->keepalive_buf = bm_buf_from_str(":\n\n");
    if (!ev->keepalive_buf || dedup_init(&ev->dd, ev->o.dedup_window) != 0) {
        bm_buf_unref(ev->keepalive_buf);
        free(ev);
        return NULL;
    }
    if (uv_random(NULL, NULL, ev->hkey, sizeof ev->hkey, 0, NULL) != 0) {
        /* no entropy source: a key from the clock still differs per process */
        uint64_t a = bm_clock_now_ms() ^ ((uint64_t)(uintptr_t)ev << 16), b = bm_clock_mono_us();
        memcpy(ev->hkey, &a, 8);
        memcpy(ev->hkey + 8, &b, 8);
    }
    uv_timer_init(loop, &ev->keepalive);
    uv_timer_init(loop, &ev->reconcile);
    uv_timer_init(loop, &ev->hold);
    ev->hold.data = ev;
    ev->keepalive.data = ev->reconcile.data = ev;
    ev->open_handles = 3;
    uv_timer_start(&ev->keepalive, on_keepalive, ev->o.keepalive_ms, ev->o.keepalive_ms);
    return ev;
}

int bm_events_attach_head(bm_events_t *ev, bm_head_t *head)
{
    bm_head_listener_t l = {.head = on_head_change, .payload = on_head_payload};
    int rc = bm_head_listen(head, &l, ev);
    if (rc == 0)
        ev->head = head;
    return rc;
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

void bm_events_shutdown(bm_events_t *ev)
{
    if (!ev || ev->shutting_down)
        return;
    ev->shutting_down = true;
    release_held(ev); /* subscribers still get what was held */
    uv_timer_stop(&ev->keepalive);
    uv_timer_stop(&ev->reconcile);
    stop_streams(ev);
    while (ev->subs) {
        sub_t *s = ev->subs;
        bm_req_t *req = s->req;
        sub_unlink(ev, s);
        free(s);
        bm_resp_end(req);
    }
}

static void on_handle_closed(uv_handle_t *h)
{
    bm_events_t *ev = h->data;
    if (--ev->open_handles == 0)
        free(ev);
}

void bm_events_free(bm_events_t *ev)
{
    if (!ev || ev->freed)
        return;
    bm_events_shutdown(ev);
    ev->freed = true;
    if (ev->head)
        bm_head_unlisten(ev->head, ev);
    pend_clear(ev);
    dedup_dispose(&ev->dd);
    bm_buf_unref(ev->keepalive_buf);
    free(ev->x);
    ev->x = NULL;
    uv_close((uv_handle_t *)&ev->keepalive, on_handle_closed);
    uv_close((uv_handle_t *)&ev->reconcile, on_handle_closed);
    uv_close((uv_handle_t *)&ev->hold, on_handle_closed);
}
