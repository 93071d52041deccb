/* SPDX-License-Identifier: MIT */
/*
 * test_nodestream: the reconnecting event stream against a scripted fake node on loopback
 * (fake_node.h); request i plays step i of its script (the last step repeats): never
 * answer, an error status with a body, or a 200 event stream written as a list of pieces
 * with a gap between them and then ended, cut, or held open (optionally with keep-alive
 * comments), its response head sent at once or only with its first piece (Lodestar).
 * The stream and the node run on one manual clock (base/clock.h): time moves only when a
 * test advances it, one due timer at a time, and between steps the loop runs until the
 * network has caught up (the node holds exactly the request the stream has open, ready
 * bytes have landed). Every timeout, backoff step and gap therefore happens at its exact
 * millisecond, and the timing assertions are equalities, however loaded the machine.
 *
 * Nothing waits on sleeps or on real time: the loop runs until a condition holds, with a
 * bound. Every test ends with uv_loop_close() == 0 (in the teardown).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/hdrs.h"
#include "base/log.h"
#include "cluster/nodestream.h"
#include "http/server.h"
#include "http/upstream.h"
#include "fake_node.h"

#define BOUND_MS 5000  /* real time a settling loop may take (never reached when all is well) */
#define WITHIN_MS 5000 /* clock time a test lets pass before it gives up on a condition */
#define MAX_REQS 64
#define MAX_EVENTS 64

/* scaled-down timings */
#define T_HEADERS 200
#define T_IDLE 300
#define T_MIN 50
#define T_MAX 400
#define T_STABLE 300

/* ---- loop helpers --------------------------------------------------------------------- */

#include "clock_steps.h"
#include "loop_guard.h"

typedef struct fx fx_t;
static uint64_t now_ms(const fx_t *f);

typedef struct ev {
    char topic[32];
    char data[256];
} ev_t;

struct fx {
    uv_loop_t loop;
    bm_clock_t *clock;   /* manual: the stream's and the node's */
    clock_steps_t steps; /* moves `clock`, settling after each move */
    bm_upstream_t *up;
    fake_nodes_t nodes;
    fake_node_t *node; /* the scripted node */
    const char *url;   /* where the stream connects: the node, or a refused port */

    bm_nodestream_t *s;
    ev_t evs[MAX_EVENTS];
    int nev;
    int ups, downs, rejects;
    uint64_t up_ms[MAX_REQS];
    uint64_t down_ms[MAX_REQS];
    bm_nodestream_failure_t downs_f[MAX_REQS];
    char reject_body[256];
    /* owner behaviour */
    const char *const *fallback; /* set these topics on a 400 */
    size_t n_fallback;
    bool free_on_event;
    bool freed;
    bool refused; /* the stream goes to a port that refuses connections */
};

static uint64_t now_ms(const fx_t *f)
{
    return bm_clock_mono_now(f->clock);
}

/* ---- moving time ------------------------------------------------------------------------- */

/* The network has caught up: no timer is due now, and the node holds a request exactly
 * while the stream has one open (sent and not yet answered, or an open stream), so nothing
 * is on its way in either direction but bytes already written. */
static bool settled(const fx_t *f)
{
    uint64_t in;
    if (bm_clock_manual_next(f->clock, &in) && in == 0)
        return false;
    bm_nodestream_state_t st =
        f->s && !f->freed ? bm_nodestream_state(f->s) : BM_NODESTREAM_STOPPED;
    bool open = st == BM_NODESTREAM_CONNECTING || st == BM_NODESTREAM_UP;
    if (f->refused)
        return !open || st == BM_NODESTREAM_UP;
    return f->node->holding == (open ? 1 : 0);
}

/* The clock moves of clock_steps.h (f->steps), settled by this file's settled(). */
static bool settled_ud(const void *ud)
{
    return settled(ud);
}

static void advance(fx_t *f, uint64_t ms)
{
    steps_advance(&f->steps, ms);
}

#define ADVANCE_UNTIL(f, cond, ms) STEPS_ADVANCE_UNTIL(&(f)->steps, cond, ms)

/* ---- the owner's callbacks --------------------------------------------------------------- */

static void cb_event(bm_nodestream_t *s, const char *topic, size_t tl, const char *data, size_t dl,
                     void *ud)
{
    fx_t *f = ud;
    assert_ptr_equal(s, f->s);
    assert_int_equal(strlen(topic), tl);
    if (f->nev < MAX_EVENTS) {
        snprintf(f->evs[f->nev].topic, sizeof f->evs[0].topic, "%s", topic);
        snprintf(f->evs[f->nev].data, sizeof f->evs[0].data, "%.*s", (int)dl, data);
        f->nev++;
    }
    if (f->free_on_event && !f->freed) {
        f->freed = true;
        bm_nodestream_free(s);
    }
}

static void cb_up(bm_nodestream_t *s, void *ud)
{
    fx_t *f = ud;
    assert_true(bm_nodestream_connected(s));
    if (f->ups < MAX_REQS)
        f->up_ms[f->ups] = now_ms(f);
    f->ups++;
}

static void cb_down(bm_nodestream_t *s, const bm_nodestream_failure_t *fl, void *ud)
{
    fx_t *f = ud;
    assert_int_equal(bm_nodestream_state(s), BM_NODESTREAM_BACKOFF);
    if (f->downs < MAX_REQS) {
        f->down_ms[f->downs] = now_ms(f);
        f->downs_f[f->downs] = *fl;
        f->downs_f[f->downs].detail = NULL;
    }
    f->downs++;
}

static void cb_rejected(bm_nodestream_t *s, int status, const char *body, size_t len, void *ud)
{
    fx_t *f = ud;
    assert_int_equal(status, 400);
    snprintf(f->reject_body, sizeof f->reject_body, "%.*s", (int)len, body);
    f->rejects++;
    if (f->fallback)
        assert_int_equal(bm_nodestream_set_topics(s, f->fallback, f->n_fallback), 0);
}

static const bm_nodestream_cbs_t cbs = {
    .on_event = cb_event, .on_up = cb_up, .on_down = cb_down, .on_rejected = cb_rejected};

static void opts_fast(bm_nodestream_opts_t *o)
{
    bm_nodestream_opts_default(o);
    o->headers_timeout_ms = T_HEADERS;
    o->idle_timeout_ms = T_IDLE;
    o->backoff_min_ms = T_MIN;
    o->backoff_max_ms = T_MAX;
    o->stable_ms = T_STABLE;
}

static bm_nodestream_t *open_stream(fx_t *f, const char *const *topics, size_t n)
{
    bm_nodestream_opts_t o;
    opts_fast(&o);
    f->s = bm_nodestream_new(f->clock, f->up, f->url, NULL, topics, n, &o, &cbs, f);
    assert_non_null(f->s);
    assert_int_equal(bm_nodestream_start(f->s), 0);
    return f->s;
}

/* ---- fixture ------------------------------------------------------------------------------ */

static int fx_setup(void **state)
{
    fx_t *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    bm_log_setup(BM_LOG_ERROR, BM_LOG_TEXT, NULL);
    if (uv_loop_init(&f->loop) != 0)
        return -1;
    f->up = bm_upstream_new(&f->loop, NULL);
    f->clock = bm_clock_manual_new(&f->loop, 1700000000000ull);
    f->steps = (clock_steps_t){&f->loop, f->clock, settled_ud, f, BOUND_MS};
    if (!f->up || !f->clock)
        return -1;
    fake_nodes_init(&f->nodes, &f->loop, NULL);
    fake_nodes_set_clock(&f->nodes, f->clock);
    f->node = fake_node_add1(&f->nodes, FAKE_HANG);
    f->url = f->node->url;
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    fx_t *f = *state;
    if (f->s && !f->freed)
        bm_nodestream_free(f->s);
    bm_upstream_free(f->up);
    fake_nodes_close(&f->nodes);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    bm_clock_free(f->clock);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    free(f);
    return 0;
}

/* ---- tests ---------------------------------------------------------------------------------- */

static const char *const head_block[] = {"head", "block"};

/* Events cut across CRLF line ends and inside lines arrive whole; topics go one per
 * parameter; the stream asks for text/event-stream. */
static void test_fragmented_crlf(void **state)
{
    fx_t *f = *state;
    fake_step_t a = {
        .status = 200,
        .stream = true,
        .gap_ms = 3,
        .pieces = {": hello\r\n\r\n", "event: he", "ad\r", "\ndata: {\"slot\":", "\"1\"}\r", "\n\r",
                   "\nevent: block\r\ndata: {\"slot\":\"1\",", "\r\n", "data: \"x\":1}\r\n\r\n",
                   "ev", "ent: head\r\ndata: {\"slot\":\"2\"}\r\n\r", "\n"},
        .end = FAKE_HOLD};
    fake_node_script(f->node, &a, 1);
    open_stream(f, head_block, 2);
    ADVANCE_UNTIL(f, f->nev >= 3, WITHIN_MS);
    assert_int_equal(f->nev, 3);
    assert_string_equal(f->node->reqs[0].target, "/eth/v1/events?topics=head&topics=block");
    assert_string_equal(fake_node_last(f->node)->accept, "text/event-stream, */*;q=0.1");
    assert_string_equal(f->evs[0].topic, "head");
    assert_string_equal(f->evs[0].data, "{\"slot\":\"1\"}");
    assert_string_equal(f->evs[1].topic, "block");
    assert_string_equal(f->evs[1].data, "{\"slot\":\"1\",\n\"x\":1}");
    assert_string_equal(f->evs[2].topic, "head");
    assert_string_equal(f->evs[2].data, "{\"slot\":\"2\"}");
    assert_int_equal(f->ups, 1);
    assert_int_equal(f->downs, 0);
    bm_nodestream_stats_t st = bm_nodestream_stats(f->s);
    assert_int_equal(st.events, 3);
    assert_int_equal(st.connects, 1);
    assert_true(st.up_since_ms > 0 && st.last_byte_ms >= st.up_since_ms);
}

/* Lighthouse writes `event:head` (no space) and LF line ends: same events. */
static void test_lighthouse_style(void **state)
{
    fx_t *f = *state;
    fake_step_t a = {.status = 200,
                     .stream = true,
                     .gap_ms = 2,
                     .pieces = {"event:head\ndata:{\"slot\":\"7\"}\n\n", "event:chain_reorg\n",
                                "data:{\"depth\":\"1\"}\n\n"},
                     .end = FAKE_HOLD};
    fake_node_script(f->node, &a, 1);
    static const char *const t[] = {"head", "chain_reorg"};
    open_stream(f, t, 2);
    ADVANCE_UNTIL(f, f->nev >= 2, WITHIN_MS);
    assert_int_equal(f->nev, 2);
    assert_string_equal(f->evs[0].topic, "head");
    assert_string_equal(f->evs[0].data, "{\"slot\":\"7\"}");
    assert_string_equal(f->evs[1].topic, "chain_reorg");
    assert_string_equal(f->evs[1].data, "{\"depth\":\"1\"}");
}

/* A node that never sends its response head: the attempt fails after headers_timeout_ms
 * and the next attempt (which answers) comes up. */
static void test_headers_timeout(void **state)
{
    fx_t *f = *state;
    fake_step_t acts[] = {
        {.status = 0},
        {.status = 200, .stream = true, .pieces = {"event: head\ndata: {}\n\n"}, .end = FAKE_HOLD}};
    fake_node_script(f->node, acts, 2);
    uint64_t t0 = now_ms(f);
    open_stream(f, head_block, 2);
    ADVANCE_UNTIL(f, f->ups == 1 && f->nev == 1, WITHIN_MS);
    assert_int_equal(f->ups, 1);
    assert_int_equal(f->downs, 1);
    assert_int_equal(f->downs_f[0].err, BM_ETIMEDOUT);
    assert_false(f->downs_f[0].was_up);
    assert_int_equal(f->downs_f[0].status, 0);
    assert_int_equal(f->down_ms[0] - t0, T_HEADERS);
    /* the retry waited its backoff step, exactly */
    assert_int_equal(f->node->requests, 2);
    assert_true(f->downs_f[0].retry_ms >= T_MIN * 3 / 4 && f->downs_f[0].retry_ms <= T_MIN);
    assert_int_equal(f->node->reqs[1].at_ms - f->down_ms[0], f->downs_f[0].retry_ms);
    bm_nodestream_stats_t st = bm_nodestream_stats(f->s);
    assert_int_equal(st.header_timeouts, 1);
    assert_int_equal(st.attempts, 2);
    assert_int_equal(st.connects, 1);
    assert_int_equal(f->nodes.held, 1); /* the hung request was given up (client went away) */
}

/* The rule for the head limit: the configured value, never less than two slots. */
static void test_head_wait_rule(void **state)
{
    (void)state;
    assert_int_equal(bm_nodestream_head_wait_ms(0, 12000), 24000);
    assert_int_equal(bm_nodestream_head_wait_ms(5000, 12000), 24000); /* the old default */
    assert_int_equal(bm_nodestream_head_wait_ms(5000, 2000), 5000);
    assert_int_equal(bm_nodestream_head_wait_ms(60000, 6000), 60000);
    assert_int_equal(bm_nodestream_head_wait_ms(0, 0), 24000); /* slot unknown: 12 s slots */
    assert_int_equal(bm_nodestream_head_wait_ms(0, UINT32_MAX), UINT32_MAX);
    bm_nodestream_opts_t o;
    bm_nodestream_opts_default(&o);
    assert_true(o.headers_timeout_ms >= 2 * 12000);
}

/* A node that sends its response head only with its first event, well after the request:
 * the stream waits (connecting, the wait visible in the stats) and comes up with that
 * event; nothing failed. */
static void test_head_with_first_event(void **state)
{
    fx_t *f = *state;
    fake_step_t a = {.status = 200,
                     .stream = true,
                     .head_with_first_piece = true,
                     .gap_ms = 3 * T_HEADERS / 2,
                     .pieces = {"event: head\ndata: {\"slot\":\"9\"}\n\n"},
                     .end = FAKE_HOLD};
    fake_node_script(f->node, &a, 1);
    bm_nodestream_opts_t o;
    opts_fast(&o);
    o.headers_timeout_ms = 4 * T_HEADERS;
    f->s = bm_nodestream_new(f->clock, f->up, f->url, NULL, head_block, 2, &o, &cbs, f);
    assert_non_null(f->s);
    uint64_t t0 = now_ms(f);
    assert_int_equal(bm_nodestream_start(f->s), 0);
    ADVANCE_UNTIL(f, f->node->requests == 1, WITHIN_MS);
    advance(f, T_HEADERS / 2);
    assert_int_equal(bm_nodestream_state(f->s), BM_NODESTREAM_CONNECTING);
    assert_true(bm_nodestream_stats(f->s).attempt_since_ms > 0);
    assert_int_equal(f->node->answered, 0); /* not a byte yet */
    ADVANCE_UNTIL(f, f->nev == 1, WITHIN_MS);
    assert_int_equal(f->nev, 1);
    assert_string_equal(f->evs[0].data, "{\"slot\":\"9\"}");
    assert_int_equal(f->ups, 1);
    assert_int_equal(f->downs, 0);
    assert_int_equal(f->up_ms[0] - t0, 3 * T_HEADERS / 2);
    bm_nodestream_stats_t st = bm_nodestream_stats(f->s);
    assert_int_equal(st.header_timeouts, 0);
    assert_int_equal(st.attempt_since_ms, 0);
    assert_int_equal(st.attempts, 1);
}

/* The limit raised while an attempt waits (the slot became known) applies to that attempt:
 * a head that comes after the old limit and before the new one is not cut. */
static void test_headers_timeout_raised_while_waiting(void **state)
{
    fx_t *f = *state;
    fake_step_t a = {.status = 200,
                     .stream = true,
                     .head_with_first_piece = true,
                     .gap_ms = 2 * T_HEADERS,
                     .pieces = {"event: head\ndata: {\"slot\":\"4\"}\n\n"},
                     .end = FAKE_HOLD};
    fake_node_script(f->node, &a, 1);
    open_stream(f, head_block, 2); /* T_HEADERS */
    ADVANCE_UNTIL(f, f->node->requests == 1, WITHIN_MS);
    bm_nodestream_set_headers_timeout(f->s, 4 * T_HEADERS);
    ADVANCE_UNTIL(f, f->nev == 1, WITHIN_MS);
    assert_int_equal(f->nev, 1);
    assert_int_equal(f->downs, 0);
    assert_int_equal(bm_nodestream_stats(f->s).header_timeouts, 0);
    assert_int_equal(bm_nodestream_stats(f->s).attempts, 1);
}

/* Waiting for the head longer than stable_ms (connected, nothing failed) is no reason to
 * back off further: each such attempt is retried after the first step, unlike attempts
 * that fail at once (test_backoff_schedule). */
static void test_long_wait_keeps_first_step(void **state)
{
    fx_t *f = *state;
    bm_nodestream_opts_t o;
    opts_fast(&o);
    o.stable_ms = T_HEADERS / 2;
    f->s = bm_nodestream_new(f->clock, f->up, f->url, NULL, head_block, 2, &o, &cbs, f);
    assert_non_null(f->s);
    assert_int_equal(bm_nodestream_start(f->s), 0); /* the node hangs (the fixture's script) */
    ADVANCE_UNTIL(f, f->downs >= 3, WITHIN_MS);
    assert_int_equal(f->downs, 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(f->downs_f[i].err, BM_ETIMEDOUT);
        assert_true(f->downs_f[i].retry_ms >= T_MIN * 3 / 4 && f->downs_f[i].retry_ms <= T_MIN);
    }
    assert_int_equal(bm_nodestream_stats(f->s).header_timeouts, 3);
}

/* A stream that goes silent is dropped after idle_timeout_ms and reconnected; a stream
 * that sends only keep-alive comments is not. */
static void test_idle_timeout(void **state)
{
    fx_t *f = *state;
    fake_step_t acts[] = {
        {.status = 200, .stream = true, .pieces = {"event: head\ndata: {}\n\n"}, .end = FAKE_HOLD},
        {.status = 200,
         .stream = true,
         .pieces = {": up\n\n"},
         .end = FAKE_HOLD,
         .keepalive_ms = T_IDLE / 4}};
    fake_node_script(f->node, acts, 2);
    open_stream(f, head_block, 2);
    ADVANCE_UNTIL(f, f->ups == 2, WITHIN_MS);
    assert_int_equal(f->ups, 2);
    assert_int_equal(f->downs, 1);
    assert_int_equal(f->downs_f[0].err, BM_ETIMEDOUT);
    assert_true(f->downs_f[0].was_up);
    assert_int_equal(f->down_ms[0] - f->up_ms[0], T_IDLE); /* silent since it came up */
    /* comments alone keep the second stream alive for three idle periods */
    advance(f, 3 * T_IDLE);
    assert_int_equal(f->downs, 1);
    assert_true(bm_nodestream_connected(f->s));
    bm_nodestream_stats_t st = bm_nodestream_stats(f->s);
    assert_int_equal(st.idle_timeouts, 1);
}

/* The backoff function: 1 s doubling to 16 s, each delay within [3/4, 1] of its step. */
static void test_backoff_function(void **state)
{
    (void)state;
    bm_nodestream_opts_t o;
    bm_nodestream_opts_default(&o);
    const uint32_t steps[] = {1000, 2000, 4000, 8000, 16000, 16000, 16000};
    for (uint32_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        assert_int_equal(bm_nodestream_backoff_ms(&o, i + 1, UINT32_MAX), steps[i]);
        assert_int_equal(bm_nodestream_backoff_ms(&o, i + 1, 0), steps[i] * 3 / 4);
        uint32_t mid = bm_nodestream_backoff_ms(&o, i + 1, 0x80000000u);
        assert_true(mid > steps[i] * 3 / 4 && mid < steps[i]);
    }
    assert_int_equal(bm_nodestream_backoff_ms(&o, UINT32_MAX, UINT32_MAX), 16000);
    assert_int_equal(bm_nodestream_backoff_ms(&o, 0, UINT32_MAX), 1000);
}

/* Against a refused port the attempts follow the schedule: delays double up to the
 * longest step, each within [3/4, 1] of its step, and the real gaps match them. */
static void test_backoff_schedule(void **state)
{
    fx_t *f = *state;
    f->url = fake_node_add_refused(&f->nodes)->url;
    f->refused = true;
    open_stream(f, head_block, 2);
    ADVANCE_UNTIL(f, f->downs >= 6, WITHIN_MS);
    assert_int_equal(f->downs, 6);
    const uint32_t step[] = {T_MIN, 2 * T_MIN, 4 * T_MIN, T_MAX, T_MAX, T_MAX};
    for (int i = 0; i < 6; i++) {
        uint32_t d = f->downs_f[i].retry_ms;
        assert_int_equal(f->downs_f[i].err, BM_ECONNREFUSED);
        assert_true(d >= step[i] * 3 / 4 && d <= step[i]);
        if (i > 0) {
            /* refused at once: each attempt fails the moment its step is over */
            assert_int_equal(f->down_ms[i] - f->down_ms[i - 1], f->downs_f[i - 1].retry_ms);
        }
    }
    assert_int_equal(bm_nodestream_stats(f->s).step, 6);
}

/* A stream that stayed up for stable_ms resets the schedule; one that dropped at once
 * does not. */
static void test_backoff_reset_after_stable(void **state)
{
    fx_t *f = *state;
    fake_step_t acts[] = {
        {.status = 200, .stream = true, .pieces = {": a\n"}, .end = FAKE_FINISH}, /* short */
        {.status = 200, .stream = true, .pieces = {": b\n"}, .end = FAKE_FINISH}, /* short */
        /* long: comments keep it up past stable_ms, then it ends */
        {.status = 200,
         .stream = true,
         .pieces = {": c\n", ": c\n", ": c\n", ": c\n"},
         .gap_ms = T_STABLE / 3,
         .end = FAKE_FINISH},
        {.status = 200, .stream = true, .pieces = {": d\n"}, .end = FAKE_HOLD, .keepalive_ms = 50}};
    fake_node_script(f->node, acts, 4);
    open_stream(f, head_block, 2);
    ADVANCE_UNTIL(f, f->ups == 4, WITHIN_MS);
    assert_int_equal(f->ups, 4);
    assert_int_equal(f->downs, 3);
    for (int i = 0; i < 3; i++) {
        assert_true(f->downs_f[i].was_up);
        assert_int_equal(f->downs_f[i].err, BM_ECONNRESET);
    }
    assert_true(f->downs_f[0].retry_ms >= T_MIN * 3 / 4 && f->downs_f[0].retry_ms <= T_MIN);
    assert_true(f->downs_f[1].retry_ms >= 2 * T_MIN * 3 / 4 && f->downs_f[1].retry_ms <= 2 * T_MIN);
    /* the third stream lived longer than stable_ms: back to the first step */
    assert_true(f->downs_f[2].retry_ms >= T_MIN * 3 / 4 && f->downs_f[2].retry_ms <= T_MIN);
    assert_int_equal(bm_nodestream_stats(f->s).step, 1);
}

/* 400: reported with the node's body, not retried blindly; the owner's fallback topic list
 * reconnects at once. */
static void test_rejected_fallback(void **state)
{
    fx_t *f = *state;
    fake_step_t acts[] = {
        {.status = 400, .body = "{\"code\":400,\"message\":\"Invalid topic: head_v2\"}"},
        {.status = 200,
         .stream = true,
         .pieces = {"event: head\ndata: {\"slot\":\"3\"}\n\n"},
         .end = FAKE_HOLD}};
    fake_node_script(f->node, acts, 2);
    static const char *const v2[] = {"head_v2", "block"};
    static const char *const v1[] = {"head", "block"};
    f->fallback = v1;
    f->n_fallback = 2;
    open_stream(f, v2, 2);
    ADVANCE_UNTIL(f, f->nev == 1, WITHIN_MS);
    assert_int_equal(f->rejects, 1);
    assert_string_equal(f->reject_body, "{\"code\":400,\"message\":\"Invalid topic: head_v2\"}");
    assert_int_equal(f->downs, 0); /* a refusal is not a failure */
    assert_int_equal(f->node->requests, 2);
    assert_string_equal(f->node->reqs[0].target, "/eth/v1/events?topics=head_v2&topics=block");
    assert_string_equal(f->node->reqs[1].target, "/eth/v1/events?topics=head&topics=block");
    assert_int_equal(f->node->reqs[1].at_ms, f->node->reqs[0].at_ms); /* at once, no backoff */
    assert_string_equal(bm_nodestream_topic(f->s, 0), "head");
    bm_nodestream_stats_t st = bm_nodestream_stats(f->s);
    assert_int_equal(st.rejections, 1);
    assert_int_equal(st.failures, 0);
}

/* 400 with an owner that does nothing: the same topics are asked again only after the
 * longest step, and other statuses are plain failures. */
static void test_rejected_parked(void **state)
{
    fx_t *f = *state;
    fake_step_t acts[] = {{.status = 400, .body = "{\"code\":400,\"message\":\"bad topic\"}"},
                          {.status = 503, .body = "{\"code\":503,\"message\":\"syncing\"}"},
                          {.status = 200, .stream = true, .pieces = {": ok\n"}, .end = FAKE_HOLD}};
    fake_node_script(f->node, acts, 3);
    open_stream(f, head_block, 2);
    ADVANCE_UNTIL(f, f->ups == 1, WITHIN_MS);
    assert_int_equal(f->rejects, 1);
    assert_int_equal(f->node->requests, 3);
    /* parked at the longest step */
    uint64_t parked = f->node->reqs[1].at_ms - f->node->reqs[0].at_ms;
    assert_true(parked >= T_MAX * 3 / 4 && parked <= T_MAX);
    assert_int_equal(f->downs, 1);
    assert_int_equal(f->downs_f[0].err, BM_EPROTO);
    assert_int_equal(f->downs_f[0].status, 503);
    assert_false(f->downs_f[0].was_up);
}

/* The node ends the stream (or cuts the connection): reported down, reconnected, and the
 * new stream's events arrive. */
static void test_reconnect_after_close(void **state)
{
    fx_t *f = *state;
    fake_step_t acts[] = {{.status = 200,
                           .stream = true,
                           .pieces = {"event: head\ndata: {\"slot\":\"1\"}\n\n"},
                           .end = FAKE_FINISH},
                          {.status = 200,
                           .stream = true,
                           .pieces = {"event: head\ndata: {\"slot\":\"2\"}\n\nevent: he"},
                           .end = FAKE_CUT},
                          {.status = 200,
                           .stream = true,
                           .pieces = {"event: head\ndata: {\"slot\":\"3\"}\n\n"},
                           .end = FAKE_HOLD}};
    fake_node_script(f->node, acts, 3);
    open_stream(f, head_block, 2);
    ADVANCE_UNTIL(f, f->nev == 3, WITHIN_MS);
    assert_int_equal(f->nev, 3);
    assert_string_equal(f->evs[0].data, "{\"slot\":\"1\"}");
    assert_string_equal(f->evs[1].data, "{\"slot\":\"2\"}");
    assert_string_equal(f->evs[2].data, "{\"slot\":\"3\"}"); /* the cut "event: he" is gone */
    assert_int_equal(f->ups, 3);
    assert_int_equal(f->downs, 2);
    assert_true(f->downs_f[0].was_up && f->downs_f[1].was_up);
    assert_int_equal(f->downs_f[0].err, BM_ECONNRESET);
    assert_int_equal(f->downs_f[1].err, BM_ECONNRESET);
    assert_true(bm_nodestream_connected(f->s));
}

/* Stop and free from inside an event: nothing runs afterwards, the loop closes clean. */
static void test_free_inside_event(void **state)
{
    fx_t *f = *state;
    fake_step_t a = {.status = 200,
                     .stream = true,
                     .pieces = {"event: head\ndata: 1\n\nevent: head\ndata: 2\n\n"},
                     .end = FAKE_HOLD,
                     .keepalive_ms = 20};
    fake_node_script(f->node, &a, 1);
    f->free_on_event = true;
    open_stream(f, head_block, 2);
    ADVANCE_UNTIL(f, f->freed, WITHIN_MS);
    assert_true(f->freed);
    advance(f, 100);
    assert_int_equal(f->nev, 1); /* the second event of the same chunk was not delivered */
    assert_int_equal(f->downs, 0);
}

/* Stop while connecting and while backing off: no callback, no request afterwards. */
static void test_stop(void **state)
{
    fx_t *f = *state;
    fake_step_t a = {.status = 0};
    fake_node_script(f->node, &a, 1);
    open_stream(f, head_block, 2);
    ADVANCE_UNTIL(f, f->node->requests == 1, WITHIN_MS);
    bm_nodestream_stop(f->s);
    assert_int_equal(bm_nodestream_state(f->s), BM_NODESTREAM_STOPPED);
    assert_int_equal(bm_nodestream_start(f->s), BM_ECLOSED);
    advance(f, T_HEADERS + 100);
    assert_int_equal(f->downs, 0);
    assert_int_equal(f->node->requests, 1);
    RUN_UNTIL(&f->loop, f->nodes.held == 0, BOUND_MS); /* the hung request saw the client go */
    assert_int_equal(f->nodes.held, 0);
}

/* Bad arguments are refused up front. */
static void test_bad_args(void **state)
{
    fx_t *f = *state;
    static const char *const comma[] = {"head,block"};
    static const char *const empty[] = {""};
    static const char *const amp[] = {"head&x=1"};
    static const char *const ok[] = {"head"};
    assert_null(bm_nodestream_new(f->clock, f->up, f->url, NULL, comma, 1, NULL, &cbs, f));
    assert_null(bm_nodestream_new(f->clock, f->up, f->url, NULL, empty, 1, NULL, &cbs, f));
    assert_null(bm_nodestream_new(f->clock, f->up, f->url, NULL, amp, 1, NULL, &cbs, f));
    assert_null(bm_nodestream_new(f->clock, f->up, f->url, NULL, ok, 0, NULL, &cbs, f));
    assert_null(bm_nodestream_new(f->clock, f->up, "ftp://x", NULL, ok, 1, NULL, &cbs, f));
    bm_nodestream_t *s = bm_nodestream_new(f->clock, f->up, f->url, NULL, ok, 1, NULL, &cbs, f);
    assert_non_null(s);
    assert_int_equal(bm_nodestream_set_topics(s, comma, 1), BM_EINVAL);
    assert_string_equal(bm_nodestream_topic(s, 0), "head");
    assert_int_equal(bm_nodestream_state(s), BM_NODESTREAM_IDLE);
    bm_nodestream_free(s);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)
    const struct CMUnitTest tests[] = {
        T(test_fragmented_crlf),
        T(test_lighthouse_style),
        T(test_headers_timeout),
        T(test_head_wait_rule),
        T(test_head_with_first_event),
        T(test_headers_timeout_raised_while_waiting),
        T(test_long_wait_keeps_first_step),
        T(test_idle_timeout),
        T(test_backoff_function),
        T(test_backoff_schedule),
        T(test_backoff_reset_after_stable),
        T(test_rejected_fallback),
        T(test_rejected_parked),
        T(test_reconnect_after_close),
        T(test_free_inside_event),
        T(test_stop),
        T(test_bad_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
