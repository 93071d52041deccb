/* SPDX-License-Identifier: MIT */
/*
 * fake_node: fake beacon nodes, the test client and beaconmux in miniature (see
 * fake_node.h for what each gives a test).
 *
 * How it is built: every request a scripted node takes is held in a record with one timer
 * on the set's clock (the delay, the gaps of a stream, its keep-alive) until the node ends
 * it or its client goes away; the set counts the records, so a teardown can wait until none
 * is left. A record is freed in its timer's close callback.
 */
#include "fake_node.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/err.h"
#include "base/log.h"
#include "fake_chain.h"

/* A request a scripted node has not ended yet (or an event stream a handler opened). */
struct fake_held {
    bm_timer_t *t;
    fake_node_t *n;
    bm_req_t *req;
    fake_step_t st;
    bool started;      /* a stream: its head is out (or pending), the timer paces its pieces */
    int next;          /* the next piece of a stream */
    bool last_out;     /* every piece of a stream is out */
    bool head_pending; /* a stream whose head leaves with its first piece, not out yet */
    bool ended;
};

static void logf_(fake_nodes_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(fake_nodes_t *s, const char *fmt, ...)
{
    size_t n = strlen(s->log);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->log + n, sizeof s->log - n, fmt, ap);
    va_end(ap);
}

/* ---- held requests ----------------------------------------------------------------------- */

static void held_closed(void *ud)
{
    fake_held_t *p = ud;
    p->n->set->held--;
    free(p);
}

/* The response head of a stream that waited for its first piece (200 unless scripted). */
static void held_head(fake_held_t *p)
{
    if (!p->head_pending)
        return;
    p->head_pending = false;
    const fake_step_t *st = &p->st;
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_hdrs_add_z(&h, "Content-Type", st->ctype ? st->ctype : "text/event-stream");
    for (int i = 0; i < FAKE_MAX_HDRS && st->hdrs[i][0]; i++)
        bm_hdrs_add_z(&h, st->hdrs[i][0], st->hdrs[i][1]);
    int rc = bm_resp_start(p->req, st->status ? st->status : 200, &h, -1);
    bm_hdrs_dispose(&h);
    if (rc == 0) { /* not when the client went away first */
        p->n->answered++;
        logf_(p->n->set, "%s<", p->n->id);
    }
}

/* Ends the held request: cut (the connection closes at once) or finished. */
static void held_end(fake_held_t *p, bool cut)
{
    if (p->ended)
        return;
    held_head(p); /* a stream that said nothing yet ends like any other */
    p->ended = true;
    fake_node_t *n = p->n;
    n->holding--;
    if (n->stream_held == p) {
        n->stream = NULL;
        n->stream_held = NULL;
    }
    if (cut)
        bm_resp_abort(p->req);
    else
        bm_resp_end(p->req);
    bm_timer_close(p->t, held_closed, p);
}

static void on_client_gone(bm_req_t *req, void *ud)
{
    fake_held_t *p = ud;
    (void)req;
    if (p->ended)
        return;
    p->n->aborted++;
    logf_(p->n->set, "%s!", p->n->id);
    held_end(p, false);
}

static void on_held_timer(bm_timer_t *t, void *ud);

static fake_held_t *held_new(fake_node_t *n, bm_req_t *req)
{
    fake_held_t *p = calloc(1, sizeof *p);
    assert_non_null(p);
    p->n = n;
    p->req = req;
    p->t = bm_timer_new(n->set->clock, on_held_timer, p);
    assert_non_null(p->t);
    n->set->held++;
    n->holding++;
    bm_req_on_abort(req, on_client_gone, p);
    return p;
}

/* The response header fields of a step, with its Content-Type (`ctype`, may be NULL). */
static void step_headers(const fake_step_t *st, const char *ctype, bm_hdrs_t *h)
{
    bm_hdrs_init(h);
    if (ctype)
        bm_hdrs_add_z(h, "Content-Type", ctype);
    for (int i = 0; i < FAKE_MAX_HDRS && st->hdrs[i][0]; i++)
        bm_hdrs_add_z(h, st->hdrs[i][0], st->hdrs[i][1]);
}

static size_t step_len(const fake_step_t *st)
{
    return st->body ? (st->len ? st->len : strlen(st->body)) : 0;
}

/* A stream's next event: a piece, then its end (or a keep-alive comment while held). */
static void on_stream_step(fake_held_t *p)
{
    if (p->ended)
        return;
    const fake_step_t *st = &p->st;
    held_head(p);
    if (p->last_out) {
        if (st->end == FAKE_HOLD) {
            bm_resp_write_copy(p->req, ":\n", 2);
            bm_timer_start(p->t, st->keepalive_ms);
        } else {
            held_end(p, st->end == FAKE_CUT);
        }
        return;
    }
    const char *piece = p->next < FAKE_MAX_PIECES ? st->pieces[p->next] : NULL;
    if (piece) {
        bm_resp_write_copy(p->req, piece, strlen(piece));
        p->next++;
    }
    if (p->next < FAKE_MAX_PIECES && st->pieces[p->next]) {
        bm_timer_start(p->t, st->gap_ms);
        return;
    }
    p->last_out = true;
    if (st->end != FAKE_HOLD)
        bm_timer_start(p->t, st->end_after_ms);
    else if (st->keepalive_ms)
        bm_timer_start(p->t, st->keepalive_ms);
}

/* The step's time has come: its answer (or the head of its stream). */
static void on_due(fake_held_t *p)
{
    if (p->ended)
        return;
    fake_node_t *n = p->n;
    const fake_step_t *st = &p->st;
    if (st->stream && st->head_with_first_piece) {
        p->head_pending = true; /* the head waits for the first piece */
        n->stream = p->req;
        n->stream_held = p;
        p->started = true;
        bm_timer_start(p->t, st->gap_ms);
        return;
    }
    n->answered++;
    logf_(n->set, "%s<", n->id);
    bm_hdrs_t h;
    if (st->stream) {
        step_headers(st, st->ctype ? st->ctype : "text/event-stream", &h);
        bm_resp_start(p->req, st->status, &h, -1);
        bm_hdrs_dispose(&h);
        n->stream = p->req;
        n->stream_held = p;
        p->started = true;
        bm_timer_start(p->t, st->gap_ms);
        return;
    }
    size_t len = step_len(st);
    if (st->cut) {
        step_headers(st, st->ctype ? st->ctype : "application/json", &h);
        bm_resp_start(p->req, st->status, &h, (int64_t)len);
        bm_hdrs_dispose(&h);
        if (st->cut_at)
            bm_resp_write_copy(p->req, st->body, st->cut_at < len ? st->cut_at : len);
        held_end(p, true);
        return;
    }
    bool empty = st->status == 204 || !st->body; /* a 204 has neither body nor type */
    step_headers(st, NULL, &h);
    bm_buf_t *b = empty ? NULL : bm_buf_copy(st->body, len);
    const char *ctype = st->status == 204 ? NULL
                        : st->ctype       ? st->ctype
                        : st->body        ? "application/json"
                                          : NULL;
    p->ended = true;
    n->holding--;
    bm_resp_send(p->req, st->status, ctype, b, &h);
    bm_buf_unref(b);
    bm_hdrs_dispose(&h);
    bm_timer_close(p->t, held_closed, p);
}

/* The held request's timer: the answer is due, or (a stream under way) its next event. */
static void on_held_timer(bm_timer_t *t, void *ud)
{
    (void)t;
    fake_held_t *p = ud;
    if (p->started)
        on_stream_step(p);
    else
        on_due(p);
}

/* ---- nodes ---------------------------------------------------------------------------------- */

static void record(fake_node_t *n, bm_req_t *req)
{
    int i = n->requests++;
    logf_(n->set, "%s>", n->id);
    if (i >= FAKE_MAX_RECORDS)
        return;
    fake_req_t *r = &n->reqs[i];
    free(r->body);
    memset(r, 0, sizeof *r);
    const char *h;
    snprintf(r->method, sizeof r->method, "%s", bm_req_method(req));
    snprintf(r->target, sizeof r->target, "%s", bm_req_target(req));
    snprintf(r->accept, sizeof r->accept, "%s", (h = bm_req_header(req, "accept")) ? h : "");
    snprintf(r->ctype, sizeof r->ctype, "%s", (h = bm_req_header(req, "content-type")) ? h : "");
    snprintf(r->version, sizeof r->version, "%s",
             (h = bm_req_header(req, "eth-consensus-version")) ? h : "");
    bm_buf_t *b = bm_req_body(req);
    r->body_len = b ? b->len : 0;
    r->body = malloc(r->body_len + 1);
    assert_non_null(r->body);
    if (r->body_len)
        memcpy(r->body, b->data, r->body_len);
    r->body[r->body_len] = '\0';
    if (bm_clock_is_manual(n->set->clock)) {
        r->at_ms = bm_clock_mono_now(n->set->clock);
    } else {
        uv_update_time(n->set->loop);
        r->at_ms = uv_now(n->set->loop);
    }
}

static void on_request(bm_req_t *req, void *ud)
{
    fake_node_t *n = ud;
    int i = n->requests;
    record(n, req);
    if (n->handler) {
        n->handler(n, req, n->ud);
        return;
    }
    fake_held_t *p = held_new(n, req);
    p->st = n->steps[i < n->nsteps ? i : n->nsteps - 1];
    if (p->st.status)
        bm_timer_start(p->t, p->st.delay_ms);
}

void fake_nodes_init(fake_nodes_t *s, uv_loop_t *loop, bm_pool_t *pool)
{
    memset(s, 0, sizeof *s);
    s->loop = loop;
    s->pool = pool;
    s->own_clock = bm_clock_real_new(loop);
    assert_non_null(s->own_clock);
    s->clock = s->own_clock;
}

void fake_nodes_set_clock(fake_nodes_t *s, bm_clock_t *clock)
{
    assert_int_equal(s->held, 0);
    s->clock = clock ? clock : s->own_clock;
}

/* Runs the loop until `settled(ud)`, then lets the I/O that is ready land: a few turns of
 * the loop that never block (a response written in one turn is flushed at its end, read
 * by its client in the next, completed at the latest in the one after), and settles again.
 * Nothing here waits for time: a turn only handles what is ready. */
static void settle(uv_loop_t *loop, bool (*settled)(const void *), const void *ud)
{
    RUN_UNTIL(loop, settled(ud), FAKE_BOUND_MS);
    assert_true(settled(ud));
    for (int i = 0; i < 8; i++)
        uv_run(loop, UV_RUN_NOWAIT);
    RUN_UNTIL(loop, settled(ud), FAKE_BOUND_MS);
    assert_true(settled(ud));
}

/* Moves `clock` `ms` forward one due timer at a time, settling the loop before the first
 * step and after each: what a timer sets off (a request, an answer, a client's response)
 * lands before the next timer fires, as if the network took no time. */
static void advance_settling(bm_clock_t *clock, uv_loop_t *loop, bool (*settled)(const void *),
                             const void *ud, uint64_t ms)
{
    settle(loop, settled, ud);
    uint64_t left = ms, in;
    while (bm_clock_manual_next(clock, &in) && in <= left) {
        bm_clock_manual_advance(clock, in);
        left -= in;
        settle(loop, settled, ud);
    }
    bm_clock_manual_advance(clock, left);
    settle(loop, settled, ud);
}

static bool nodes_settled(const void *ud)
{
    return fake_nodes_settled(ud);
}

void fake_nodes_advance(fake_nodes_t *s, uint64_t ms)
{
    advance_settling(s->clock, s->loop, nodes_settled, s, ms);
}

bool fake_nodes_settled(const fake_nodes_t *s)
{
    uint64_t in;
    if (bm_clock_is_manual(s->clock) && bm_clock_manual_next(s->clock, &in) && in == 0)
        return false; /* a timer due now still fires from the loop */
    for (int i = 0; i < s->n; i++) {
        const fake_node_t *n = &s->node[i];
        if (!n->node)
            return false; /* no pool: nothing to compare with */
        if (n->node->stats.in_flight != (uint64_t)n->holding)
            return false;
    }
    return true;
}

/* The next node of the set, named after its place. */
static fake_node_t *node_new(fake_nodes_t *s)
{
    assert_true(s->n < FAKE_MAX_NODES);
    fake_node_t *n = &s->node[s->n];
    memset(n, 0, sizeof *n);
    snprintf(n->id, sizeof n->id, "%c", 'a' + s->n);
    s->n++;
    n->set = s;
    return n;
}

/* Gives the node its port, and its pool entry when the set has a pool. */
static void node_at(fake_node_t *n, int port)
{
    n->port = port;
    snprintf(n->url, sizeof n->url, "http://127.0.0.1:%d", port);
    if (n->set->pool) {
        n->node = bm_pool_add(n->set->pool, n->id, n->url, NULL);
        assert_non_null(n->node);
    }
}

static fake_node_t *node_listening(fake_nodes_t *s)
{
    fake_node_t *n = node_new(s);
    n->srv = bm_server_new(s->loop, NULL, on_request, n);
    assert_non_null(n->srv);
    assert_int_equal(bm_server_listen(n->srv, "127.0.0.1", 0), 0);
    node_at(n, bm_server_port(n->srv));
    return n;
}

fake_node_t *fake_node_add(fake_nodes_t *s, const fake_step_t *steps, int nsteps)
{
    fake_node_t *n = node_listening(s);
    fake_node_script(n, steps, nsteps);
    return n;
}

fake_node_t *fake_node_add1(fake_nodes_t *s, fake_step_t step)
{
    return fake_node_add(s, &step, 1);
}

fake_node_t *fake_node_add_handler(fake_nodes_t *s, fake_handler_fn fn, void *ud)
{
    assert_non_null(fn);
    fake_node_t *n = node_listening(s);
    n->handler = fn;
    n->ud = ud;
    return n;
}

static void on_probe_closed(uv_handle_t *h)
{
    (void)h;
}

fake_node_t *fake_node_add_refused(fake_nodes_t *s)
{
    uv_tcp_t probe;
    struct sockaddr_in sa;
    uv_ip4_addr("127.0.0.1", 0, &sa);
    assert_int_equal(uv_tcp_init(s->loop, &probe), 0);
    assert_int_equal(uv_tcp_bind(&probe, (const struct sockaddr *)&sa, 0), 0);
    struct sockaddr_in got;
    int len = sizeof got;
    assert_int_equal(uv_tcp_getsockname(&probe, (struct sockaddr *)&got, &len), 0);
    uv_close((uv_handle_t *)&probe, on_probe_closed);
    uv_run(s->loop, UV_RUN_NOWAIT);
    fake_node_t *n = node_new(s);
    node_at(n, ntohs(got.sin_port));
    return n;
}

void fake_node_script(fake_node_t *n, const fake_step_t *steps, int nsteps)
{
    assert_true(nsteps > 0 && nsteps <= FAKE_MAX_STEPS);
    memcpy(n->steps, steps, sizeof *steps * (size_t)nsteps);
    n->nsteps = nsteps;
    n->requests = 0;
}

const fake_req_t *fake_node_last(const fake_node_t *n)
{
    assert_true(n->requests > 0);
    int i = n->requests - 1;
    return &n->reqs[i < FAKE_MAX_RECORDS ? i : FAKE_MAX_RECORDS - 1];
}

static void on_srv_done(bm_server_t *srv, void *ud)
{
    (void)srv;
    ((fake_node_t *)ud)->srv_done = true;
}

static bool nodes_closed(const fake_nodes_t *s)
{
    for (int i = 0; i < s->n; i++)
        if (s->node[i].srv && !s->node[i].srv_done)
            return false;
    return s->held == 0;
}

void fake_node_down(fake_node_t *n)
{
    assert_non_null(n->srv);
    assert_false(n->down);
    n->down = true;
    bm_server_shutdown(n->srv, 0, on_srv_done, n);
    RUN_UNTIL(n->set->loop, n->srv_done, FAKE_BOUND_MS);
    assert_true(n->srv_done);
}

void fake_fail_case(int kase, fake_node_t *b, fake_node_t *c)
{
    if (kase == 1) {
        fake_node_script(b, &FAKE_STATUS(500, 0, "{\"code\":500,\"message\":\"boom\"}"), 1);
        fake_node_script(c, &FAKE_STATUS(503, 0, "{\"code\":503,\"message\":\"busy\"}"), 1);
    }
    if (kase == 2) {
        fake_node_down(b);
        fake_node_down(c);
    }
}

const char *fake_fail_case_answer(int kase)
{
    static char want[512];
    const char *to = bm_strerror(BM_ETIMEDOUT), *refused = bm_strerror(BM_ECONNREFUSED);
    if (kase == 1)
        snprintf(want, sizeof want,
                 "{\"code\":503,\"message\":\"no usable answer: a: %s; b: 500 boom; c: 503 busy\"}",
                 to);
    else
        snprintf(want, sizeof want,
                 "{\"code\":503,\"message\":\"no upstream answered: a: %s; b: %s; c: %s\"}", to,
                 kase ? refused : to, kase ? refused : to);
    return want;
}

void fake_nodes_close(fake_nodes_t *s)
{
    for (int i = 0; i < s->n; i++)
        if (s->node[i].srv && !s->node[i].down)
            bm_server_shutdown(s->node[i].srv, 20, on_srv_done, &s->node[i]);
    RUN_UNTIL(s->loop, nodes_closed(s), FAKE_BOUND_MS);
    assert_true(nodes_closed(s));
    bm_clock_free(s->own_clock); /* every record's timer is closed */
    s->own_clock = NULL;
    s->clock = NULL;
    for (int i = 0; i < s->n; i++) {
        fake_node_t *n = &s->node[i];
        if (n->srv)
            bm_server_free(n->srv);
        n->srv = NULL;
        for (int k = 0; k < FAKE_MAX_RECORDS; k++) {
            free(n->reqs[k].body);
            n->reqs[k].body = NULL;
        }
    }
}

/* ---- answering from a handler ------------------------------------------------------------- */

void fake_send_json(bm_req_t *req, int status, const char *fmt, ...)
{
    bm_str_t s = BM_STR_INIT;
    va_list ap;
    va_start(ap, fmt);
    bm_str_vprintf(&s, fmt, ap);
    va_end(ap);
    bm_buf_t *b = bm_str_finish(&s);
    assert_non_null(b);
    bm_resp_send(req, status, "application/json", b, NULL);
    bm_buf_unref(b);
}

void fake_stream_open(fake_node_t *n, bm_req_t *req)
{
    if (n->stream_held)
        held_end(n->stream_held, false);
    fake_held_t *p = held_new(n, req);
    p->last_out = true; /* nothing scripted: the test writes */
    p->started = true;
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_hdrs_add_z(&h, "Content-Type", "text/event-stream");
    bm_resp_start(req, 200, &h, -1);
    bm_hdrs_dispose(&h);
    n->answered++;
    n->stream = req;
    n->stream_held = p;
}

void fake_stream_open_lazy(fake_node_t *n, bm_req_t *req)
{
    if (n->stream_held)
        held_end(n->stream_held, false);
    fake_held_t *p = held_new(n, req);
    p->last_out = true; /* nothing scripted: the test writes */
    p->started = true;
    p->head_pending = true;
    n->stream = req;
    n->stream_held = p;
}

void fake_stream_write(fake_node_t *n, const char *text)
{
    assert_non_null(n->stream);
    if (n->stream_held)
        held_head(n->stream_held);
    assert_int_equal(bm_resp_write_copy(n->stream, text, strlen(text)), 0);
}

void fake_stream_event(fake_node_t *n, const char *topic, const char *data)
{
    char buf[1024];
    int len = snprintf(buf, sizeof buf, "event: %s\ndata: %s\n\n", topic, data);
    assert_true(len > 0 && (size_t)len < sizeof buf);
    fake_stream_write(n, buf);
}

void fake_stream_end(fake_node_t *n)
{
    assert_non_null(n->stream_held);
    held_end(n->stream_held, false);
}

/* ---- the client ------------------------------------------------------------------------------ */

static void on_call_done(bm_xfer_t *x, const bm_xfer_result_t *res, void *ud)
{
    fake_call_t *c = ud;
    (void)x;
    c->x = NULL;
    c->done = true;
    c->err = res->err;
    c->status = res->status;
    c->end_ms = c->clock ? bm_clock_wall_now(c->clock) : bm_clock_now_ms();
    if (res->headers)
        assert_int_equal(bm_hdrs_copy(&c->hdrs, res->headers), 0);
    c->body_len = res->body ? res->body->len : 0;
    free(c->body);
    c->body = malloc(c->body_len + 1);
    assert_non_null(c->body);
    if (c->body_len)
        memcpy(c->body, res->body->data, c->body_len);
    c->body[c->body_len] = '\0';
}

void fake_call_start(fake_call_t *c, bm_upstream_t *up, const bm_clock_t *clock, int port,
                     const fake_request_t *rq)
{
    memset(c, 0, sizeof *c);
    c->clock = clock;
    bm_hdrs_init(&c->hdrs);
    c->body = calloc(1, 1);
    assert_non_null(c->body);
    char url[1024];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, rq->target);
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    if (rq->accept)
        bm_hdrs_add_z(&h, "Accept", rq->accept);
    if (rq->ctype)
        bm_hdrs_add_z(&h, "Content-Type", rq->ctype);
    if (rq->version)
        bm_hdrs_add_z(&h, "Eth-Consensus-Version", rq->version);
    bm_buf_t *b = NULL;
    if (rq->body) {
        b = bm_buf_copy(rq->body, rq->len ? rq->len : strlen(rq->body));
        assert_non_null(b);
    }
    bm_xfer_req_t xr = {
        .method = rq->method ? rq->method : "GET",
        .url = url,
        .headers = &h,
        .body = b,
        .timeout_ms = rq->timeout_ms ? rq->timeout_ms : 10000,
    };
    static const bm_xfer_cbs_t cbs = {.on_done = on_call_done};
    c->start_ms = clock ? bm_clock_wall_now(clock) : bm_clock_now_ms();
    c->x = bm_upstream_start(up, &xr, &cbs, c);
    assert_non_null(c->x);
    bm_buf_unref(b);
    bm_hdrs_dispose(&h);
}

const char *fake_call_header(const fake_call_t *c, const char *name)
{
    const char *v = bm_hdrs_get(&c->hdrs, name);
    return v ? v : "";
}

uint64_t fake_call_ms(const fake_call_t *c)
{
    return c->end_ms - c->start_ms;
}

void fake_call_dispose(fake_call_t *c)
{
    if (c->x)
        bm_upstream_cancel(c->x);
    c->x = NULL;
    bm_hdrs_dispose(&c->hdrs);
    free(c->body);
    c->body = NULL;
}

/* ---- beaconmux in miniature ----------------------------------------------------------------- */

/* The front's handler: counts the request, then routes it. */
static void front_dispatch(bm_req_t *req, void *ud)
{
    fake_mux_t *m = ud;
    m->dispatched++;
    bm_router_dispatch(req, m->router);
}

static fake_mux_t *mux_new(bool pool_records, bool manual)
{
    fake_mux_t *m = calloc(1, sizeof *m);
    assert_non_null(m);
    bm_log_setup(BM_LOG_ERROR, BM_LOG_TEXT, NULL);
    assert_int_equal(uv_loop_init(&m->loop), 0);
    m->clock =
        manual ? bm_clock_manual_new(&m->loop, bm_clock_now_ms()) : bm_clock_real_new(&m->loop);
    assert_non_null(m->clock);
    bm_upstream_opts_t o;
    bm_upstream_opts_default(&o);
    m->up = bm_upstream_new(&m->loop, &o);
    m->cup = bm_upstream_new(&m->loop, &o);
    m->pool = bm_pool_new();
    m->router = bm_router_new();
    assert_non_null(m->up);
    assert_non_null(m->cup);
    assert_non_null(m->pool);
    assert_non_null(m->router);
    m->eng = bm_race_engine_new(m->clock, m->up, pool_records ? m->pool : NULL);
    assert_non_null(m->eng);
    m->front = bm_server_new(&m->loop, NULL, front_dispatch, m);
    assert_non_null(m->front);
    assert_int_equal(bm_server_listen(m->front, "127.0.0.1", 0), 0);
    m->front_port = bm_server_port(m->front);
    fake_nodes_init(&m->nodes, &m->loop, m->pool);
    if (manual)
        fake_nodes_set_clock(&m->nodes, m->clock);
    fake_chain_now(&m->chain, 12000, 8, 40, BM_FORK_FULU);
    /* half of slot 40 gone on the mux's clock (a manual one starts at the system's time) */
    m->chain.clock.genesis_ms = bm_clock_wall_now(m->clock) - 40 * 12000 - 6000;
    return m;
}

fake_mux_t *fake_mux_new(bool pool_records)
{
    return mux_new(pool_records, false);
}

fake_mux_t *fake_mux_new_manual(bool pool_records)
{
    return mux_new(pool_records, true);
}

/* Every call reached the front (or is done), and nothing is in transit to or from the
 * nodes. */
static bool mux_settled(const void *ud)
{
    const fake_mux_t *m = ud;
    bool landed = m->dispatched == m->n_calls;
    for (int i = 0; i < m->n_calls && !landed; i++)
        if (!m->calls[i].done)
            return false;
    return fake_nodes_settled(&m->nodes);
}

void fake_mux_advance(fake_mux_t *m, uint64_t ms)
{
    advance_settling(m->clock, &m->loop, mux_settled, m, ms);
}

void fake_mux_settle(fake_mux_t *m)
{
    settle(&m->loop, mux_settled, m);
}

uint64_t fake_mux_since(const fake_mux_t *m, uint64_t t0_ms)
{
    return bm_clock_wall_now(m->clock) - t0_ms;
}

int fake_mux_setup(void **state)
{
    *state = fake_mux_new(true);
    return 0;
}

int fake_mux_manual_setup(void **state)
{
    *state = fake_mux_new_manual(true);
    return 0;
}

int fake_mux_teardown(void **state)
{
    fake_mux_free(*state);
    return 0;
}

fake_node_t *fake_mux_node(fake_mux_t *m, const fake_step_t *steps, int n)
{
    fake_node_t *node = fake_node_add(&m->nodes, steps, n);
    node->node->state = BM_NODE_READY;
    return node;
}

fake_node_t *fake_mux_node1(fake_mux_t *m, fake_step_t step)
{
    return fake_mux_node(m, &step, 1);
}

fake_call_t *fake_mux_call(fake_mux_t *m, const fake_request_t *rq)
{
    assert_true(m->n_calls < FAKE_MAX_CALLS);
    fake_call_t *c = &m->calls[m->n_calls++];
    fake_call_start(c, m->cup, m->clock, m->front_port, rq);
    return c;
}

fake_call_t *fake_mux_send(fake_mux_t *m, const char *method, const char *target, const char *json,
                           const char *accept)
{
    fake_request_t rq = {.method = method,
                         .target = target,
                         .accept = accept,
                         .ctype = json ? "application/json" : NULL,
                         .body = json};
    return fake_mux_call(m, &rq);
}

fake_call_t *fake_mux_send_wait(fake_mux_t *m, const char *method, const char *target,
                                const char *json, const char *accept)
{
    fake_call_t *c = fake_mux_send(m, method, target, json, accept);
    fake_mux_wait(m, c);
    return c;
}

void fake_mux_wait(fake_mux_t *m, fake_call_t *c)
{
    RUN_UNTIL(&m->loop, c->done, FAKE_BOUND_MS);
    assert_true(c->done);
    assert_int_equal(c->err, 0);
}

fake_call_t *fake_mux_get(fake_mux_t *m, const char *target, const char *accept)
{
    fake_request_t rq = {.target = target, .accept = accept};
    return fake_mux_call(m, &rq);
}

static void on_front_done(bm_server_t *srv, void *ud)
{
    (void)srv;
    ((fake_mux_t *)ud)->front_done = true;
}

void fake_mux_free(fake_mux_t *m)
{
    /* calls still running are cancelled (a test that failed midway) */
    for (int i = 0; i < m->n_calls; i++)
        if (m->calls[i].x) {
            bm_upstream_cancel(m->calls[i].x);
            m->calls[i].x = NULL;
        }
    /* the front first: its requests end and leave their races */
    bm_server_shutdown(m->front, 20, on_front_done, m);
    RUN_UNTIL(&m->loop, m->front_done, FAKE_BOUND_MS);
    assert_true(m->front_done);
    if (m->module_stop)
        m->module_stop(m->module);
    bm_race_engine_free(m->eng);
    bm_upstream_free(m->up);
    bm_upstream_free(m->cup);
    fake_nodes_close(&m->nodes);
    bm_server_free(m->front);
    uv_run(&m->loop, UV_RUN_DEFAULT);
    if (m->module_free)
        m->module_free(m->module);
    bm_clock_free(m->clock); /* after everything that made timers on it */
    uv_run(&m->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&m->loop), 0);
    for (int i = 0; i < m->n_calls; i++)
        fake_call_dispose(&m->calls[i]);
    bm_router_free(m->router);
    bm_pool_free(m->pool);
    free(m);
}
