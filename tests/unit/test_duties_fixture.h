/* SPDX-License-Identifier: MIT */
/*
 * test_duties_fixture: the end-to-end rig of the duty policy tests (test_aggregate.c,
 * test_duties.c). A client request goes the whole way a validator client's would:
 *
 *   client (libcurl) -> front server (src/http/server.h) -> router -> policy -> race engine
 *                    -> fake beacon nodes (src/http/server.h on loopback, scripted answers)
 *
 * Each fake node answers from a script: request i gets step i (the last step repeats), a
 * step being a status, a body (any bytes), a Content-Type and one extra header field
 * after a delay, or no answer at all (hang). Nodes count their requests. Nothing sleeps:
 * the loop runs until a condition holds, with a bound, and teardown checks that the loop
 * closes cleanly. Static functions only; each test binary includes it once.
 */
#ifndef TEST_DUTIES_FIXTURE_H
#define TEST_DUTIES_FIXTURE_H

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
#include "cluster/chain.h"
#include "cluster/pool.h"
#include "duties/race.h"
#include "http/router.h"
#include "http/server.h"
#include "http/upstream.h"

#define BOUND_MS 5000 /* every wait ends within this, or the test fails */
#define SLACK_MS 150  /* allowed lateness of a timed decision on a shared machine */
#define MAX_NODES 4
#define MAX_STEPS 8
#define MAX_CALLS 8

/* ---- loop helpers ----------------------------------------------------------------------- */

#include "loop_guard.h"

/* ---- fake nodes ------------------------------------------------------------------------- */

typedef struct step {
    int status; /* 0: never answer */
    uint32_t delay_ms;
    const char *body;
    size_t len;        /* 0: strlen(body) */
    const char *ctype; /* NULL: application/json */
    const char *hname, *hvalue;
} step_t;

typedef struct fx fx_t;

typedef struct tnode {
    fx_t *f;
    char id[8];
    bm_server_t *srv;
    bool srv_done;
    int port;
    bm_node_t *node;
    step_t steps[MAX_STEPS];
    int nsteps;
    int requests, answered, aborted;
    char target[512];
    char body[512];
} tnode_t;

typedef struct preq {
    uv_timer_t t;
    tnode_t *tn;
    bm_req_t *req;
    step_t st;
    bool ended;
} preq_t;

/* A client request through the front server. */
typedef struct call {
    bm_xfer_t *x;
    bool done;
    int err, status;
    char ctype[64];
    char version[32]; /* Eth-Consensus-Version */
    bm_buf_t *body;
    uint64_t start_ms, end_ms;
} call_t;

struct fx {
    uv_loop_t loop;
    bm_upstream_t *up;  /* the engine's */
    bm_upstream_t *cup; /* the test client's */
    bm_pool_t *pool;
    bm_race_engine_t *eng;
    bm_router_t *router;
    bm_server_t *front;
    bool front_done;
    int front_port;
    bm_chain_info_t chain;
    tnode_t nodes[MAX_NODES];
    int n_nodes;
    int preqs;
    call_t calls[MAX_CALLS];
    int n_calls;
    void *module;
    void (*module_free)(void *module);
};

static inline void preq_closed(uv_handle_t *h)
{
    preq_t *p = h->data;
    p->tn->f->preqs--;
    free(p);
}

static inline void on_answer_due(uv_timer_t *t)
{
    preq_t *p = t->data;
    tnode_t *tn = p->tn;
    if (p->ended)
        return;
    p->ended = true;
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    if (p->st.hname)
        bm_hdrs_add_z(&h, p->st.hname, p->st.hvalue);
    const char *body = p->st.body ? p->st.body : "";
    bm_buf_t *b = bm_buf_copy(body, p->st.len ? p->st.len : strlen(body));
    tn->answered++;
    bm_resp_send(p->req, p->st.status, p->st.ctype ? p->st.ctype : "application/json", b, &h);
    bm_buf_unref(b);
    bm_hdrs_dispose(&h);
    uv_close((uv_handle_t *)&p->t, preq_closed);
}

static inline void on_req_abort(bm_req_t *req, void *ud)
{
    preq_t *p = ud;
    if (p->ended)
        return;
    p->ended = true;
    p->tn->aborted++;
    bm_resp_end(req);
    uv_close((uv_handle_t *)&p->t, preq_closed);
}

static inline void on_node_request(bm_req_t *req, void *ud)
{
    tnode_t *tn = ud;
    int i = tn->requests++;
    snprintf(tn->target, sizeof tn->target, "%s", bm_req_target(req));
    bm_buf_t *body = bm_req_body(req);
    snprintf(tn->body, sizeof tn->body, "%.*s", body ? (int)body->len : 0, body ? body->data : "");
    preq_t *p = calloc(1, sizeof *p);
    assert_non_null(p);
    p->tn = tn;
    p->req = req;
    p->st = tn->steps[i < tn->nsteps ? i : tn->nsteps - 1];
    uv_timer_init(&tn->f->loop, &p->t);
    p->t.data = p;
    tn->f->preqs++;
    bm_req_on_abort(req, on_req_abort, p);
    if (p->st.status)
        uv_timer_start(&p->t, on_answer_due, p->st.delay_ms, 0);
}

/* A node answering from `steps` (1..MAX_STEPS). */
static inline tnode_t *add_node(fx_t *f, const step_t *steps, int nsteps)
{
    assert_true(f->n_nodes < MAX_NODES && nsteps > 0 && nsteps <= MAX_STEPS);
    tnode_t *tn = &f->nodes[f->n_nodes];
    snprintf(tn->id, sizeof tn->id, "%c", 'a' + f->n_nodes);
    f->n_nodes++;
    tn->f = f;
    memcpy(tn->steps, steps, sizeof *steps * (size_t)nsteps);
    tn->nsteps = nsteps;
    tn->srv = bm_server_new(&f->loop, NULL, on_node_request, tn);
    assert_non_null(tn->srv);
    assert_int_equal(bm_server_listen(tn->srv, "127.0.0.1", 0), 0);
    tn->port = bm_server_port(tn->srv);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", tn->port);
    tn->node = bm_pool_add(f->pool, tn->id, url, NULL);
    assert_non_null(tn->node);
    return tn;
}

static inline tnode_t *add1(fx_t *f, step_t s)
{
    return add_node(f, &s, 1);
}

/* Replaces a node's script (the request counter goes on). */
static inline void set_steps(tnode_t *tn, const step_t *steps, int nsteps)
{
    memcpy(tn->steps, steps, sizeof *steps * (size_t)nsteps);
    tn->nsteps = nsteps;
    tn->requests = 0;
}

#define HANG ((step_t){0})
#define OK(ms, body) ((step_t){200, (ms), (body), 0, NULL, NULL, NULL})
#define ST(code, ms, body) ((step_t){(code), (ms), (body), 0, NULL, NULL, NULL})

static inline void set_ready(fx_t *f, tnode_t *tn, bm_node_state_t s)
{
    bm_pool_set_state(f->pool, tn->node, s, "test");
}

/* ---- the client -------------------------------------------------------------------------- */

static inline void on_call_done(bm_xfer_t *x, const bm_xfer_result_t *res, void *ud)
{
    call_t *c = ud;
    (void)x;
    c->done = true;
    c->x = NULL;
    c->err = res->err;
    c->status = res->status;
    c->end_ms = bm_clock_now_ms();
    c->body = bm_buf_ref(res->body);
    const char *ct = res->headers ? bm_hdrs_get(res->headers, "content-type") : NULL;
    snprintf(c->ctype, sizeof c->ctype, "%s", ct ? ct : "");
    const char *v = res->headers ? bm_hdrs_get(res->headers, "eth-consensus-version") : NULL;
    snprintf(c->version, sizeof c->version, "%s", v ? v : "");
}

/* Sends a request to the front server; the loop must run for it to complete. */
static inline call_t *call(fx_t *f, const char *method, const char *target, const char *body,
                           const char *accept)
{
    assert_true(f->n_calls < MAX_CALLS);
    call_t *c = &f->calls[f->n_calls++];
    memset(c, 0, sizeof *c);
    char url[1024];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", f->front_port, target);
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    if (accept)
        bm_hdrs_add_z(&h, "Accept", accept);
    if (body)
        bm_hdrs_add_z(&h, "Content-Type", "application/json");
    bm_buf_t *b = body ? bm_buf_from_str(body) : NULL;
    bm_xfer_req_t xr = {
        .method = method, .url = url, .headers = &h, .body = b, .timeout_ms = 10000};
    static const bm_xfer_cbs_t cbs = {NULL, NULL, on_call_done};
    c->start_ms = bm_clock_now_ms();
    c->x = bm_upstream_start(f->cup, &xr, &cbs, c);
    assert_non_null(c->x);
    bm_buf_unref(b);
    bm_hdrs_dispose(&h);
    return c;
}

/* Runs a call to its end and asserts it ended. */
static inline call_t *call_wait(fx_t *f, const char *method, const char *target, const char *body,
                                const char *accept)
{
    call_t *c = call(f, method, target, body, accept);
    RUN_UNTIL(&f->loop, c->done, BOUND_MS);
    assert_true(c->done);
    assert_int_equal(c->err, 0);
    return c;
}

static inline uint64_t elapsed(const call_t *c)
{
    return c->end_ms - c->start_ms;
}

static inline const char *body_of(const call_t *c)
{
    return c->body ? c->body->data : "";
}

/* ---- fixture ------------------------------------------------------------------------------ */

/* A chain clock with slot `slot` half gone now; every fork up to `fork` active from genesis. */
static inline void fx_chain(fx_t *f, uint32_t slot_ms, uint32_t spe, uint64_t slot, bm_fork_t fork)
{
    memset(&f->chain, 0, sizeof f->chain);
    f->chain.known = true;
    f->chain.clock.slot_ms = slot_ms;
    f->chain.clock.slots_per_epoch = spe;
    f->chain.clock.genesis_ms = bm_clock_now_ms() - slot * slot_ms - slot_ms / 2;
    for (int i = 0; i < BM_FORK_NAMED; i++)
        f->chain.fork_epoch[i] = i <= (int)fork ? 0 : BM_FAR_FUTURE_EPOCH;
    for (int d = 0; d < BM_DUE_COUNT; d++) {
        static const uint32_t pre[BM_DUE_COUNT] = {3333, 6667, 3333, 6667, 7500};
        static const uint32_t gl[BM_DUE_COUNT] = {2500, 5000, 2500, 5000, 7500};
        f->chain.due_bps[d] = pre[d];
        f->chain.due_bps_gloas[d] = gl[d];
    }
}

static inline void on_front_request(bm_req_t *req, void *ud)
{
    bm_router_dispatch(req, ud);
}

static inline int fx_setup(void **state)
{
    fx_t *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    bm_log_setup(BM_LOG_ERROR, BM_LOG_TEXT, NULL);
    if (uv_loop_init(&f->loop) != 0)
        return -1;
    bm_upstream_opts_t o;
    bm_upstream_opts_default(&o);
    f->up = bm_upstream_new(&f->loop, &o);
    f->cup = bm_upstream_new(&f->loop, &o);
    f->pool = bm_pool_new();
    f->router = bm_router_new();
    if (!f->up || !f->cup || !f->pool || !f->router)
        return -1;
    f->eng = bm_race_engine_new(&f->loop, f->up, f->pool);
    f->front = bm_server_new(&f->loop, NULL, on_front_request, f->router);
    if (!f->eng || !f->front || bm_server_listen(f->front, "127.0.0.1", 0) != 0)
        return -1;
    f->front_port = bm_server_port(f->front);
    fx_chain(f, 12000, 8, 40, BM_FORK_FULU);
    *state = f;
    return 0;
}

static inline void on_srv_done(bm_server_t *srv, void *ud)
{
    (void)srv;
    *(bool *)ud = true;
}

static inline bool all_servers_done(fx_t *f)
{
    for (int i = 0; i < f->n_nodes; i++)
        if (!f->nodes[i].srv_done)
            return false;
    return f->front_done;
}

static inline int fx_teardown(void **state)
{
    fx_t *f = *state;
    /* calls still running are cancelled (a test that fails midway) */
    for (int i = 0; i < f->n_calls; i++)
        if (f->calls[i].x)
            bm_upstream_cancel(f->calls[i].x);
    bm_server_shutdown(f->front, 20, on_srv_done, &f->front_done);
    for (int i = 0; i < f->n_nodes; i++)
        bm_server_shutdown(f->nodes[i].srv, 20, on_srv_done, &f->nodes[i].srv_done);
    RUN_UNTIL(&f->loop, all_servers_done(f) && f->preqs == 0, BOUND_MS);
    assert_true(all_servers_done(f));
    assert_int_equal(f->preqs, 0);
    bm_race_engine_free(f->eng);
    if (f->module_free)
        f->module_free(f->module);
    bm_upstream_free(f->up);
    bm_upstream_free(f->cup);
    bm_server_free(f->front);
    for (int i = 0; i < f->n_nodes; i++)
        bm_server_free(f->nodes[i].srv);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    for (int i = 0; i < f->n_calls; i++)
        bm_buf_unref(f->calls[i].body);
    bm_router_free(f->router);
    bm_pool_free(f->pool);
    free(f);
    return 0;
}

#endif /* TEST_DUTIES_FIXTURE_H */
