/* SPDX-License-Identifier: MIT */
/*
 * nodestream: a state machine over one libcurl streaming transfer at a time and one
 * timer (on the injected clock, base/clock.h) whose meaning follows the state:
 *
 *   IDLE --start--> CONNECTING --200--> UP --drop/idle--> BACKOFF --timer--> CONNECTING
 *                       |  \--400--> BACKOFF (owner told: on_rejected; parked at max step)
 *                       \--fail/headers timeout--> BACKOFF
 *   any --stop/free--> STOPPED
 *
 * CONNECTING lasts until the response head arrives, which some nodes (Lodestar) send only
 * with their first event: waiting there is normal, and its limit (headers_timeout_ms) is
 * at least two slots. In CONNECTING the timer is the response-head deadline, in UP (and
 * while a non-200 body arrives) the idle deadline, in BACKOFF the next attempt. Both
 * deadlines re-arm themselves for the remaining time when they fire early (the byte path
 * only stores a timestamp; a new head limit only changes the number), so no timer call is
 * made per read.
 *
 * The owner's callbacks may call anything back, so every attempt carries a generation:
 * when a callback returns, a changed generation (or a stop) means the attempt it was
 * about is gone and nothing more is done for it. New attempts started from inside a
 * callback are deferred to the timer (0 ms), so the SSE parser is never reset while it is
 * feeding, and the struct is freed only in the timer's close callback.
 */
#include "cluster/nodestream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/defaults.h"
#include "base/err.h"
#include "base/log.h"
#include "base/url.h"
#include "http/sse.h"

#define ERRBODY_MAX 4096u

struct bm_nodestream {
    bm_clock_t *clock;
    bm_upstream_t *up;
    char *base_url;
    char *url_masked;
    char *path;
    bm_hdrs_t hdrs;  /* Accept, Cache-Control */
    bm_hdrs_t extra; /* per-node fields */
    char **topics;
    size_t n_topics;
    char *url; /* base + path + query for the current topic list */
    bm_nodestream_opts_t opts;
    bm_nodestream_cbs_t cbs;
    void *ud;

    bm_sse_t *sse;
    bm_timer_t *timer;
    bm_xfer_t *x; /* the running transfer, or NULL */
    bm_nodestream_state_t state;
    bool started;
    bool freed;
    uint64_t gen;          /* bumped whenever the current attempt is abandoned */
    int cb_depth;          /* owner callbacks on the stack */
    bool head_seen;        /* the current attempt got its response head */
    int status;            /* ... with this status */
    bm_str_t errbody;      /* first bytes of a non-200 body */
    uint64_t rx_mono;      /* monotonic ms of the last byte */
    uint64_t up_mono;      /* monotonic ms of the 200 */
    uint64_t attempt_mono; /* monotonic ms the current attempt was sent */
    uint32_t rng;
    bm_nodestream_stats_t st;
    bm_log_limit_t log_lim;
};

static const char *const state_names[] = {"idle", "connecting", "up", "backoff", "stopped"};

const char *bm_nodestream_state_name(bm_nodestream_state_t st)
{
    return (unsigned)st < sizeof state_names / sizeof state_names[0] ? state_names[st] : "?";
}

void bm_nodestream_opts_default(bm_nodestream_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->connect_timeout_ms = BM_DEFAULT_TIMEOUTS_CONNECT_MS;
    /* events.headersTimeout not set: two slots of the usual 12 s until the owner knows */
    o->headers_timeout_ms = bm_nodestream_head_wait_ms(BM_DEFAULT_EVENTS_HEADERS_TIMEOUT_MS, 0);
    o->idle_timeout_ms = 24000;
    o->backoff_min_ms = 1000;
    o->backoff_max_ms = 16000;
    o->stable_ms = 5000;
    o->max_event_bytes = BM_SSE_DEFAULT_MAX_DATA;
    o->path = "/eth/v1/events";
}

uint32_t bm_nodestream_head_wait_ms(uint32_t configured_ms, uint32_t slot_ms)
{
    uint64_t two_slots = 2ull * (slot_ms ? slot_ms : 12000u);
    uint64_t w = configured_ms > two_slots ? configured_ms : two_slots;
    return w > UINT32_MAX ? UINT32_MAX : (uint32_t)w;
}

uint32_t bm_nodestream_backoff_ms(const bm_nodestream_opts_t *o, uint32_t step, uint32_t rnd)
{
    uint64_t min = o->backoff_min_ms ? o->backoff_min_ms : 1;
    uint64_t max = o->backoff_max_ms >= min ? o->backoff_max_ms : min;
    uint64_t base = min;
    for (uint32_t i = 1; i < step && base < max; i++)
        base *= 2;
    if (base > max)
        base = max;
    /* [3/4, 1] of the step: never longer than the step, spread enough that nodes restarted
     * together do not reconnect in lockstep */
    uint64_t span = base / 4;
    uint64_t jitter = span ? (uint64_t)rnd * (span + 1) >> 32 : 0;
    return (uint32_t)(base - span + jitter);
}

static uint32_t next_rand(bm_nodestream_t *s)
{
    /* xorshift32: jitter only, no need for more */
    uint32_t x = s->rng;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return s->rng = x;
}

static void set_state(bm_nodestream_t *s, bm_nodestream_state_t st)
{
    if (s->state == st)
        return;
#ifdef BM_DEBUG
    bm_log(BM_LOG_DEBUG, "nodestream %s: %s -> %s", s->url_masked,
           bm_nodestream_state_name(s->state), bm_nodestream_state_name(st));
#endif
    s->state = st;
}

/* ---- topics and URL ------------------------------------------------------------------- */

static bool topic_ok(const char *t)
{
    size_t n = t ? strlen(t) : 0;
    if (n == 0 || n > BM_NODESTREAM_MAX_TOPIC_LEN)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = t[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-'))
            return false;
    }
    return true;
}

static void free_topics(char **t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(t[i]);
    free(t);
}

/* Builds the topic copies and the URL for them; nothing changes on failure. */
static int install_topics(bm_nodestream_t *s, const char *const *topics, size_t n)
{
    if (!topics || n == 0 || n > BM_NODESTREAM_MAX_TOPICS)
        return BM_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!topic_ok(topics[i]))
            return BM_EINVAL;
    char **copy = calloc(n, sizeof *copy);
    if (!copy)
        return BM_ENOMEM;
    bm_str_t q = BM_STR_INIT;
    bm_str_puts(&q, s->path);
    for (size_t i = 0; i < n; i++) {
        copy[i] = strdup(topics[i]);
        if (!copy[i]) {
            free_topics(copy, n);
            bm_str_dispose(&q);
            return BM_ENOMEM;
        }
        bm_str_printf(&q, "%ctopics=%s", i ? '&' : '?', topics[i]);
    }
    bm_str_t url = BM_STR_INIT;
    int rc = q.oom ? BM_ENOMEM : bm_url_join(&url, s->base_url, bm_str_data(&q));
    bm_str_dispose(&q);
    if (rc == 0 && url.oom)
        rc = BM_ENOMEM;
    char *u = rc == 0 ? strdup(bm_str_data(&url)) : NULL;
    bm_str_dispose(&url);
    if (!u) {
        free_topics(copy, n);
        return rc ? rc : BM_ENOMEM;
    }
    free_topics(s->topics, s->n_topics);
    free(s->url);
    s->topics = copy;
    s->n_topics = n;
    s->url = u;
    return 0;
}

/* ---- the transfer --------------------------------------------------------------------- */

static void on_timer(bm_timer_t *t, void *ud);
static void attempt(bm_nodestream_t *s);

static void arm(bm_nodestream_t *s, uint64_t ms)
{
    bm_timer_start(s->timer, ms);
}

/* Forgets the running transfer (cancelling it) and the current attempt. */
static void abandon(bm_nodestream_t *s)
{
    s->gen++;
    if (s->x) {
        bm_upstream_cancel(s->x);
        s->x = NULL;
    }
    bm_timer_stop(s->timer);
    s->head_seen = false;
    s->st.attempt_since_ms = 0;
    s->status = 0;
    bm_str_clear(&s->errbody);
}

/* Schedules the next attempt in `ms` (0: on the next loop turn). */
static void schedule(bm_nodestream_t *s, uint32_t ms)
{
    set_state(s, BM_NODESTREAM_BACKOFF);
    arm(s, ms);
}

/* The attempt failed or the stream dropped: back off, tell the owner. */
static void fail(bm_nodestream_t *s, int err, const char *detail)
{
    bool was_up = s->state == BM_NODESTREAM_UP;
    uint64_t now = bm_clock_mono_now(s->clock);
    int status = s->status;
    if (was_up && now - s->up_mono >= s->opts.stable_ms)
        s->st.step = 0; /* it was up long enough: start the schedule over */
    /* Connected and waiting for the head that long, without the connection failing: the
     * node is there and had nothing to say. Try again soon rather than after a growing
     * backoff, during which its first event could be missed. */
    bool head_timeout =
        !was_up && err == BM_ETIMEDOUT && !s->head_seen && s->state == BM_NODESTREAM_CONNECTING;
    if (head_timeout && now - s->attempt_mono >= s->opts.stable_ms)
        s->st.step = 0;
    abandon(s);
    s->st.step++;
    uint32_t delay = bm_nodestream_backoff_ms(&s->opts, s->st.step, next_rand(s));
    s->st.failures++;
    s->st.last_err = err;
    s->st.last_retry_ms = delay;
    s->st.up_since_ms = 0;
    schedule(s, delay);
    bm_log_limited(&s->log_lim, was_up ? BM_LOG_INFO : BM_LOG_DEBUG,
                   "nodestream %s: %s (%s); reconnecting in %u ms", s->url_masked,
                   was_up ? "stream dropped" : "connect failed", detail, delay);
    if (s->cbs.on_down) {
        bm_nodestream_failure_t f = {.err = err,
                                     .status = status,
                                     .was_up = was_up,
                                     .head_timeout = head_timeout,
                                     .detail = detail,
                                     .retry_ms = delay};
        s->cb_depth++;
        s->cbs.on_down(s, &f, s->ud);
        s->cb_depth--;
    }
}

/* 400: the node refuses the topic list. Parked at the longest step unless the owner acts. */
static void reject(bm_nodestream_t *s)
{
    int status = s->status;
    bm_str_t body = s->errbody; /* taken over: abandon must not clear it */
    s->errbody = (bm_str_t)BM_STR_INIT;
    abandon(s);
    uint32_t delay = bm_nodestream_backoff_ms(&s->opts, UINT32_MAX, next_rand(s));
    s->st.rejections++;
    s->st.last_err = BM_EPROTO;
    s->st.last_retry_ms = delay;
    s->st.up_since_ms = 0;
    schedule(s, delay);
    bm_log_limited(&s->log_lim, BM_LOG_WARN, "nodestream %s: topics refused (%d): %.200s",
                   s->url_masked, status, bm_str_data(&body));
    if (s->cbs.on_rejected) {
        s->cb_depth++;
        s->cbs.on_rejected(s, status, bm_str_data(&body), bm_str_len(&body), s->ud);
        s->cb_depth--;
    }
    bm_str_dispose(&body);
}

static void on_head(bm_xfer_t *x, int status, const bm_hdrs_t *headers, void *ud)
{
    bm_nodestream_t *s = ud;
    (void)headers;
    if (x != s->x)
        return;
    s->head_seen = true;
    s->st.attempt_since_ms = 0;
    s->status = status;
    s->st.last_status = status;
    s->rx_mono = bm_clock_mono_now(s->clock);
    /* from now on the timer watches silence, whatever the status */
    arm(s, s->opts.idle_timeout_ms);
    if (status != 200)
        return; /* the body is the node's error, reported at the end */
    s->st.connects++;
    s->up_mono = s->rx_mono;
    s->st.up_since_ms = bm_clock_wall_now(s->clock);
    set_state(s, BM_NODESTREAM_UP);
    if (s->cbs.on_up) {
        s->cb_depth++;
        s->cbs.on_up(s, s->ud);
        s->cb_depth--;
    }
}

static int on_sse_event(void *ud, const bm_sse_event_t *ev)
{
    bm_nodestream_t *s = ud;
    uint64_t gen = s->gen;
    s->st.events++;
    if (s->cbs.on_event) {
        s->cb_depth++;
        s->cbs.on_event(s, ev->topic, ev->topic_len, ev->data, ev->data_len, s->ud);
        s->cb_depth--;
    }
    return gen != s->gen || s->state != BM_NODESTREAM_UP; /* stop: the owner moved on */
}

static void on_sse_error(void *ud, int err, const char *reason)
{
    bm_nodestream_t *s = ud;
    s->st.dropped_events++;
    bm_log_limited(&s->log_lim, BM_LOG_WARN, "nodestream %s: event dropped: %s (%s)", s->url_masked,
                   reason, bm_strerror(err));
}

static int on_data(bm_xfer_t *x, const char *p, size_t n, void *ud)
{
    bm_nodestream_t *s = ud;
    if (x != s->x)
        return 0;
    s->rx_mono = bm_clock_mono_now(s->clock);
    s->st.bytes += n;
    s->st.last_byte_ms = bm_clock_wall_now(s->clock);
    if (s->status != 200) {
        size_t have = bm_str_len(&s->errbody);
        if (have < ERRBODY_MAX)
            bm_str_append(&s->errbody, p, n < ERRBODY_MAX - have ? n : ERRBODY_MAX - have);
        return 0;
    }
    bm_sse_feed(s->sse, p, n); /* an owner that moved on stopped it; the next attempt resets */
    return 0;
}

static void on_done(bm_xfer_t *x, const bm_xfer_result_t *res, void *ud)
{
    bm_nodestream_t *s = ud;
    if (x != s->x)
        return;
    s->x = NULL;
    if (res->status)
        s->st.last_status = res->status;
    if (s->head_seen && s->status == 400) {
        reject(s);
    } else if (res->err) {
        fail(s, res->err, res->detail && res->detail[0] ? res->detail : bm_strerror(res->err));
    } else if (s->status != 200) {
        char d[64];
        snprintf(d, sizeof d, "HTTP status %d", s->status);
        fail(s, BM_EPROTO, d);
    } else {
        fail(s, BM_ECONNRESET, "the node ended the stream");
    }
}

static void attempt(bm_nodestream_t *s)
{
    abandon(s);
    bm_sse_reset(s->sse);
    set_state(s, BM_NODESTREAM_CONNECTING);
    s->st.attempts++;
    bm_xfer_req_t req = {
        .method = "GET",
        .url = s->url,
        .headers = &s->hdrs,
        .extra = s->extra.n ? &s->extra : NULL,
        .connect_timeout_ms = s->opts.connect_timeout_ms,
        .timeout_ms = 0,
        .idle_timeout_ms = 0, /* ours: it must not count before the head arrives */
        .stream = true,
    };
    bm_xfer_cbs_t cbs = {.on_head = on_head, .on_data = on_data, .on_done = on_done};
    s->rx_mono = bm_clock_mono_now(s->clock);
    s->attempt_mono = s->rx_mono;
    s->x = bm_upstream_start(s->up, &req, &cbs, s);
    if (!s->x) {
        fail(s, BM_EIO, "the request could not be started");
        return;
    }
    s->st.attempt_since_ms = bm_clock_wall_now(s->clock);
    arm(s, s->opts.headers_timeout_ms);
}

/* The timer of a wait of at most limit_ms, `waited` ms in: before the limit it is armed for
 * the rest (the limit may have grown meanwhile); at it the wait is counted and the attempt
 * fails, saying "<what> <limit> ms". */
static void waited_out(bm_nodestream_t *s, uint64_t waited, uint32_t limit_ms, uint64_t *count,
                       const char *what)
{
    if (waited < limit_ms) {
        arm(s, limit_ms - waited);
        return;
    }
    (*count)++;
    char d[96];
    snprintf(d, sizeof d, "%s %u ms", what, limit_ms);
    fail(s, BM_ETIMEDOUT, d);
}

static void on_timer(bm_timer_t *t, void *ud)
{
    bm_nodestream_t *s = ud;
    (void)t;
    uint64_t now = bm_clock_mono_now(s->clock);
    switch (s->state) {
    case BM_NODESTREAM_BACKOFF:
        attempt(s);
        break;
    case BM_NODESTREAM_CONNECTING:
        if (!s->head_seen) {
            waited_out(s, now - s->attempt_mono, s->opts.headers_timeout_ms, &s->st.header_timeouts,
                       "no response headers within");
            break;
        }
        /* a non-200 body is arriving: watched for silence like a stream */
        __attribute__((fallthrough));
    case BM_NODESTREAM_UP:
        waited_out(s, now - s->rx_mono, s->opts.idle_timeout_ms, &s->st.idle_timeouts,
                   "no byte for");
        break;
    case BM_NODESTREAM_IDLE:
    case BM_NODESTREAM_STOPPED:
        break;
    }
}

/* ---- lifetime --------------------------------------------------------------------------- */

static void destroy(bm_nodestream_t *s)
{
    bm_sse_free(s->sse);
    free_topics(s->topics, s->n_topics);
    free(s->url);
    free(s->base_url);
    free(s->url_masked);
    free(s->path);
    bm_hdrs_dispose(&s->hdrs);
    bm_hdrs_dispose(&s->extra);
    bm_str_dispose(&s->errbody);
    free(s);
}

static void on_close(void *ud)
{
    destroy(ud);
}

bm_nodestream_t *bm_nodestream_new(bm_clock_t *clock, bm_upstream_t *up, const char *base_url,
                                   const bm_hdrs_t *extra, const char *const *topics,
                                   size_t n_topics, const bm_nodestream_opts_t *opts,
                                   const bm_nodestream_cbs_t *cbs, void *ud)
{
    if (!clock || !up || !base_url || !bm_url_valid(base_url))
        return NULL;
    bm_nodestream_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->clock = clock;
    s->up = up;
    s->ud = ud;
    if (cbs)
        s->cbs = *cbs;
    bm_nodestream_opts_t def;
    bm_nodestream_opts_default(&def);
    s->opts = def;
    if (opts) {
        /* A zero or NULL means "not set": take the default. */
        s->opts = *opts;
        if (!s->opts.path)
            s->opts.path = def.path;
        if (!s->opts.connect_timeout_ms)
            s->opts.connect_timeout_ms = def.connect_timeout_ms;
        if (!s->opts.headers_timeout_ms)
            s->opts.headers_timeout_ms = def.headers_timeout_ms;
        if (!s->opts.idle_timeout_ms)
            s->opts.idle_timeout_ms = def.idle_timeout_ms;
        if (!s->opts.backoff_min_ms)
            s->opts.backoff_min_ms = def.backoff_min_ms;
        if (s->opts.backoff_max_ms < s->opts.backoff_min_ms)
            s->opts.backoff_max_ms = s->opts.backoff_min_ms;
        if (!s->opts.max_event_bytes)
            s->opts.max_event_bytes = def.max_event_bytes;
    }
    bm_hdrs_init(&s->hdrs);
    bm_hdrs_init(&s->extra);
    bm_str_t masked = BM_STR_INIT;
    bm_url_mask(&masked, base_url);
    s->base_url = strdup(base_url);
    s->url_masked = masked.oom ? NULL : strdup(bm_str_data(&masked));
    bm_str_dispose(&masked);
    s->path = strdup(s->opts.path);
    s->opts.path = s->path;
    bm_sse_config_t sc = {.max_data = s->opts.max_event_bytes,
                          .on_event = on_sse_event,
                          .on_error = on_sse_error,
                          .ud = s};
    s->sse = bm_sse_new(&sc);
    if (!s->base_url || !s->url_masked || !s->path || !s->sse ||
        /* the stream's type first; the wildcard at a low weight for servers whose generic
         * negotiation knows only JSON and SSZ and would answer a lone event-stream with 406
         * (beaconsim does) */
        bm_hdrs_add_z(&s->hdrs, "Accept", "text/event-stream, */*;q=0.1") != 0 ||
        bm_hdrs_add_z(&s->hdrs, "Cache-Control", "no-cache") != 0 ||
        (extra && bm_hdrs_copy(&s->extra, extra) != 0) ||
        install_topics(s, topics, n_topics) != 0) {
        destroy(s);
        return NULL;
    }
    s->rng = (uint32_t)(uv_hrtime() ^ (uintptr_t)s) | 1u;
    s->log_lim.window_ms = 60000;
    s->log_lim.burst = 5;
    s->timer = bm_timer_new(clock, on_timer, s);
    if (!s->timer) {
        destroy(s);
        return NULL;
    }
    return s;
}

int bm_nodestream_start(bm_nodestream_t *s)
{
    if (s->freed || s->state == BM_NODESTREAM_STOPPED)
        return BM_ECLOSED;
    if (s->started)
        return BM_EINVAL;
    s->started = true;
    if (s->cb_depth)
        schedule(s, 0);
    else
        attempt(s);
    return 0;
}

int bm_nodestream_set_topics(bm_nodestream_t *s, const char *const *topics, size_t n_topics)
{
    if (s->freed)
        return BM_ECLOSED;
    int rc = install_topics(s, topics, n_topics);
    if (rc)
        return rc;
    bm_nodestream_reconnect(s);
    return 0;
}

void bm_nodestream_reconnect(bm_nodestream_t *s)
{
    if (s->freed || !s->started || s->state == BM_NODESTREAM_STOPPED)
        return;
    abandon(s);
    s->st.up_since_ms = 0;
    schedule(s, 0); /* from the loop: never resets the parser under its own feed */
}

void bm_nodestream_set_idle_timeout(bm_nodestream_t *s, uint32_t idle_timeout_ms)
{
    if (idle_timeout_ms)
        s->opts.idle_timeout_ms = idle_timeout_ms;
}

void bm_nodestream_set_headers_timeout(bm_nodestream_t *s, uint32_t headers_timeout_ms)
{
    if (!headers_timeout_ms || s->freed)
        return;
    s->opts.headers_timeout_ms = headers_timeout_ms;
    if (s->state != BM_NODESTREAM_CONNECTING || s->head_seen || !s->x)
        return;
    /* the attempt waiting now: its deadline counts from when it was sent */
    uint64_t waited = bm_clock_mono_now(s->clock) - s->attempt_mono;
    arm(s, waited < headers_timeout_ms ? headers_timeout_ms - waited : 0);
}

void bm_nodestream_stop(bm_nodestream_t *s)
{
    if (!s || s->state == BM_NODESTREAM_STOPPED)
        return;
    abandon(s);
    s->st.up_since_ms = 0;
    set_state(s, BM_NODESTREAM_STOPPED);
}

void bm_nodestream_free(bm_nodestream_t *s)
{
    if (!s || s->freed)
        return;
    bm_nodestream_stop(s);
    s->freed = true;
    bm_timer_close(s->timer, on_close, s);
}

bm_nodestream_state_t bm_nodestream_state(const bm_nodestream_t *s)
{
    return s->state;
}

bool bm_nodestream_connected(const bm_nodestream_t *s)
{
    return s->state == BM_NODESTREAM_UP;
}

size_t bm_nodestream_topic_count(const bm_nodestream_t *s)
{
    return s->n_topics;
}

const char *bm_nodestream_topic(const bm_nodestream_t *s, size_t i)
{
    return i < s->n_topics ? s->topics[i] : NULL;
}

bm_nodestream_stats_t bm_nodestream_stats(const bm_nodestream_t *s)
{
    return s->st;
}
