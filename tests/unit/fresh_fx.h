/* SPDX-License-Identifier: MIT */
/*
 * fresh_fx: the fixture shared by test_hint, test_attest and test_produce.
 *
 *   - a synthetic chain: roots by id, chain information with chosen fork epochs and due
 *     times, and a head tracker fed with head events whose header requests are answered
 *     at once from the synthetic chain;
 *   - fake beacon nodes on loopback (the project's HTTP server on the test's loop)
 *     answering from a script: request i gets step i (the last step repeats), a step being
 *     a status, a body (text or bytes), a Content-Type and up to four more header fields
 *     after a delay, or no answer at all (hang). Each node counts its requests;
 *   - beaconmux in miniature: the project's server and router in front of a race engine,
 *     with the policy under test registered, and a client made of the upstream module.
 *
 * Nothing sleeps: the loop runs until a condition holds, with a bound. Teardown ends with
 * uv_loop_close() == 0.
 */
#ifndef BM_TEST_FRESH_FX_H
#define BM_TEST_FRESH_FX_H

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
#include "cluster/head.h"
#include "cluster/pool.h"
#include "duties/hint.h"
#include "duties/race.h"
#include "http/router.h"
#include "http/server.h"
#include "http/upstream.h"

#define FX_BOUND_MS 5000
#define FX_MAX_NODES 4
#define FX_MAX_STEPS 8
#define FX_MAX_HDRS 4
#define FX_MAX_BLOCKS 256
#define FX_MAX_CLIENTS 64

/* ---- loop helpers -------------------------------------------------------------------------- */

typedef struct fx_guard {
    uv_timer_t t;
    bool expired;
} fx_guard_t;

static inline void fx_on_guard(uv_timer_t *t)
{
    ((fx_guard_t *)t->data)->expired = true;
}

static inline void fx_free_data(uv_handle_t *h)
{
    free(h->data);
}

static inline fx_guard_t *fx_guard_start(uv_loop_t *loop, uint64_t ms)
{
    fx_guard_t *g = calloc(1, sizeof *g);
    assert_non_null(g);
    uv_timer_init(loop, &g->t);
    g->t.data = g;
    uv_timer_start(&g->t, fx_on_guard, ms, 0);
    return g;
}

/* Runs the loop until `cond` holds or `ms` passed (the caller then asserts `cond`). */
#define FX_RUN_UNTIL(loop, cond, ms)                                                               \
    do {                                                                                           \
        fx_guard_t *g_ = fx_guard_start((loop), (ms));                                             \
        while (!(cond) && !g_->expired)                                                            \
            uv_run((loop), UV_RUN_ONCE);                                                           \
        uv_close((uv_handle_t *)&g_->t, fx_free_data);                                             \
    } while (0)

/* ---- the synthetic chain ------------------------------------------------------------------- */

/* Root number `id`: 0xB0, the id, 0x5A. */
static inline void fx_root(unsigned id, uint8_t out[32])
{
    memset(out, 0, 32);
    out[0] = 0xB0;
    out[1] = (uint8_t)(id >> 8);
    out[2] = (uint8_t)id;
    out[31] = 0x5A;
}

static inline void fx_root_hex(unsigned id, char out[67])
{
    uint8_t r[32];
    fx_root(id, r);
    out[0] = '0';
    out[1] = 'x';
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 + 2 * i, 3, "%02x", r[i]);
}

/* Chain information: every fork up to fulu from genesis except electra (and fulu) at
 * `electra_epoch`, gloas at `gloas_epoch` (BM_FAR_FUTURE_EPOCH: none); the spec's due
 * times. */
static inline void fx_chain_info(bm_chain_info_t *c, uint64_t genesis_ms, uint32_t slot_ms,
                                 uint32_t spe, uint64_t electra_epoch, uint64_t gloas_epoch)
{
    memset(c, 0, sizeof *c);
    c->known = true;
    c->clock.genesis_ms = genesis_ms;
    c->clock.slot_ms = slot_ms;
    c->clock.slots_per_epoch = spe;
    for (int f = 0; f < BM_FORK_NAMED; f++)
        c->fork_epoch[f] = BM_FAR_FUTURE_EPOCH;
    for (int f = BM_FORK_PHASE0; f <= BM_FORK_DENEB; f++)
        c->fork_epoch[f] = 0;
    c->fork_epoch[BM_FORK_ELECTRA] = electra_epoch;
    c->fork_epoch[BM_FORK_FULU] = electra_epoch;
    c->fork_epoch[BM_FORK_GLOAS] = gloas_epoch;
    uint32_t pre[BM_DUE_COUNT] = {3333, 6667, 3333, 6667, 7500};
    uint32_t gl[BM_DUE_COUNT] = {2500, 5000, 2500, 5000, 7500};
    memcpy(c->due_bps, pre, sizeof pre);
    memcpy(c->due_bps_gloas, gl, sizeof gl);
}

/* A head tracker fed by hand; its header requests are answered from `parent`/`slot`. */
typedef struct fx_chain {
    bm_head_t *t;
    bm_chain_info_t info;
    uint64_t now;              /* the time inputs are given at */
    bool known[FX_MAX_BLOCKS]; /* block id -> known */
    unsigned parent[FX_MAX_BLOCKS];
    uint64_t slot[FX_MAX_BLOCKS];
    bool defer; /* hold header requests until fx_chain_release */
    struct {
        uint8_t root[32];
        size_t node;
    } held[16];
    int n_held;
} fx_chain_t;

static inline void fx_chain_fetch(const uint8_t root[32], uint64_t slot, size_t node, void *ud)
{
    fx_chain_t *c = ud;
    (void)slot;
    if (c->defer && c->n_held < 16) {
        memcpy(c->held[c->n_held].root, root, 32);
        c->held[c->n_held++].node = node;
        return;
    }
    unsigned id = (unsigned)root[1] << 8 | root[2];
    if (root[0] != 0xB0 || id >= FX_MAX_BLOCKS || !c->known[id]) {
        bm_head_on_parent_failed(c->t, node, root, c->now);
        return;
    }
    uint8_t p[32];
    fx_root(c->parent[id], p);
    bm_head_on_parent(c->t, node, root, c->slot[id], p, c->now);
}

/* Answers the header requests held while `defer` was set (and stops holding). */
static inline void fx_chain_release(fx_chain_t *c, uint64_t now)
{
    c->defer = false;
    c->now = now;
    int n = c->n_held;
    c->n_held = 0;
    for (int i = 0; i < n; i++)
        fx_chain_fetch(c->held[i].root, UINT64_MAX, c->held[i].node, c);
}

/* A tracker for `n` nodes over `info`, clock set at `now`. */
static inline void fx_chain_init(fx_chain_t *c, size_t n, const bm_chain_info_t *info, uint64_t now)
{
    memset(c, 0, sizeof *c);
    c->info = *info;
    c->now = now;
    c->t = bm_head_new(n, NULL);
    assert_non_null(c->t);
    bm_head_set_fetch(c->t, fx_chain_fetch, c);
    assert_int_equal(bm_head_set_clock(c->t, &c->info.clock, now), 0);
}

static inline void fx_chain_dispose(fx_chain_t *c)
{
    bm_head_free(c->t);
    c->t = NULL;
}

/* Declares block `id` at `slot` on `parent`. */
static inline void fx_block(fx_chain_t *c, unsigned id, uint64_t slot, unsigned parent)
{
    assert_true(id < FX_MAX_BLOCKS);
    c->known[id] = true;
    c->slot[id] = slot;
    c->parent[id] = parent;
}

/* Node `node` announces block `id` as its head at `now` (payload status as given). */
static inline void fx_head(fx_chain_t *c, size_t node, unsigned id, uint64_t now,
                           bm_payload_status_t payload)
{
    c->now = now;
    bm_head_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.slot = c->slot[id];
    fx_root(id, ev.root);
    ev.payload = payload;
    ev.topic = payload == BM_PAYLOAD_UNKNOWN ? BM_HEAD_TOPIC_HEAD : BM_HEAD_TOPIC_HEAD_V2;
    assert_int_equal(bm_head_on_head(c->t, node, &ev, now), 0);
}

/* The cluster head's root id (-1 without one). */
static inline int fx_cluster_id(const fx_chain_t *c)
{
    bm_head_info_t hi;
    if (!bm_head_cluster(c->t, &hi))
        return -1;
    return (int)((unsigned)hi.root[1] << 8 | hi.root[2]);
}

/* ---- fake nodes ------------------------------------------------------------------------------ */

typedef struct fx_step {
    int status; /* 0: never answer */
    uint32_t delay_ms;
    const void *body; /* text, or bytes when body_len > 0 */
    size_t body_len;
    const char *ctype; /* Content-Type (NULL: application/json) */
    const char *h[FX_MAX_HDRS][2];
} fx_step_t;

typedef struct fx fx_t;

typedef struct fx_node {
    fx_t *f;
    char id[8];
    bm_server_t *srv;
    bool srv_done;
    bm_node_t *node;
    fx_step_t steps[FX_MAX_STEPS];
    int nsteps;
    int requests;
    char target[256];
    char accept[128];
} fx_node_t;

typedef struct fx_preq {
    uv_timer_t t;
    fx_node_t *n;
    bm_req_t *req;
    fx_step_t st;
    bool ended;
} fx_preq_t;

typedef struct fx_client {
    fx_t *f;
    bool done;
    int err, status;
    bm_hdrs_t hdrs;
    char body[4096];
    size_t body_len;
    uint64_t start_ms, end_ms;
} fx_client_t;

struct fx {
    uv_loop_t loop;
    bm_upstream_t *up;
    bm_pool_t *pool;
    bm_race_engine_t *eng;
    bm_hint_t *hint;
    bm_router_t *router;
    bm_server_t *mux;
    bool mux_done;
    int mux_port;
    fx_node_t nodes[FX_MAX_NODES];
    int n_nodes;
    int preqs;
    fx_client_t clients[FX_MAX_CLIENTS];
    int n_clients;
};

static inline void fx_preq_closed(uv_handle_t *h)
{
    fx_preq_t *p = h->data;
    p->n->f->preqs--;
    free(p);
}

static inline void fx_answer_due(uv_timer_t *t)
{
    fx_preq_t *p = t->data;
    if (p->ended)
        return;
    p->ended = true;
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    for (int i = 0; i < FX_MAX_HDRS && p->st.h[i][0]; i++)
        bm_hdrs_add_z(&h, p->st.h[i][0], p->st.h[i][1]);
    bm_buf_t *b = p->st.body_len ? bm_buf_copy(p->st.body, p->st.body_len)
                                 : bm_buf_from_str(p->st.body ? p->st.body : "");
    bm_resp_send(p->req, p->st.status,
                 p->st.status == 204 ? NULL
                 : p->st.ctype       ? p->st.ctype
                                     : "application/json",
                 p->st.status == 204 ? NULL : b, &h);
    bm_buf_unref(b);
    bm_hdrs_dispose(&h);
    uv_close((uv_handle_t *)&p->t, fx_preq_closed);
}

static inline void fx_req_abort(bm_req_t *req, void *ud)
{
    fx_preq_t *p = ud;
    if (p->ended)
        return;
    p->ended = true;
    bm_resp_end(req);
    uv_close((uv_handle_t *)&p->t, fx_preq_closed);
}

static inline void fx_on_node_request(bm_req_t *req, void *ud)
{
    fx_node_t *n = ud;
    int i = n->requests++;
    snprintf(n->target, sizeof n->target, "%s", bm_req_target(req));
    const char *acc = bm_req_header(req, "accept");
    snprintf(n->accept, sizeof n->accept, "%s", acc ? acc : "");
    fx_preq_t *p = calloc(1, sizeof *p);
    assert_non_null(p);
    p->n = n;
    p->req = req;
    p->st = n->steps[i < n->nsteps ? i : n->nsteps - 1];
    uv_timer_init(&n->f->loop, &p->t);
    p->t.data = p;
    n->f->preqs++;
    bm_req_on_abort(req, fx_req_abort, p);
    if (p->st.status)
        uv_timer_start(&p->t, fx_answer_due, p->st.delay_ms, 0);
}

/* A node answering from `steps`; its pool state is `state`. */
static inline fx_node_t *fx_add_node(fx_t *f, const fx_step_t *steps, int nsteps,
                                     bm_node_state_t state)
{
    assert_true(f->n_nodes < FX_MAX_NODES && nsteps > 0 && nsteps <= FX_MAX_STEPS);
    fx_node_t *n = &f->nodes[f->n_nodes];
    snprintf(n->id, sizeof n->id, "%c", 'a' + f->n_nodes);
    f->n_nodes++;
    n->f = f;
    memcpy(n->steps, steps, sizeof *steps * (size_t)nsteps);
    n->nsteps = nsteps;
    n->srv = bm_server_new(&f->loop, NULL, fx_on_node_request, n);
    assert_non_null(n->srv);
    assert_int_equal(bm_server_listen(n->srv, "127.0.0.1", 0), 0);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", bm_server_port(n->srv));
    n->node = bm_pool_add(f->pool, n->id, url, NULL);
    assert_non_null(n->node);
    n->node->state = state;
    return n;
}

/* Replaces a node's script (its request count restarts). */
static inline void fx_script(fx_node_t *n, const fx_step_t *steps, int nsteps)
{
    assert_true(nsteps > 0 && nsteps <= FX_MAX_STEPS);
    memcpy(n->steps, steps, sizeof *steps * (size_t)nsteps);
    n->nsteps = nsteps;
    n->requests = 0;
}

/* ---- beaconmux in miniature ---------------------------------------------------------------- */

static inline fx_t *fx_new(void)
{
    fx_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    bm_log_setup(BM_LOG_ERROR, BM_LOG_TEXT, NULL);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    bm_upstream_opts_t o;
    bm_upstream_opts_default(&o);
    f->up = bm_upstream_new(&f->loop, &o);
    f->pool = bm_pool_new();
    assert_non_null(f->up);
    assert_non_null(f->pool);
    f->eng = bm_race_engine_new(&f->loop, f->up, NULL);
    assert_non_null(f->eng);
    f->hint = bm_hint_new(NULL);
    assert_non_null(f->hint);
    f->router = bm_router_new();
    assert_non_null(f->router);
    return f;
}

/* Starts the server in front of the router (after the policy registered its routes). */
static inline void fx_listen(fx_t *f)
{
    f->mux = bm_server_new(&f->loop, NULL, bm_router_dispatch, f->router);
    assert_non_null(f->mux);
    assert_int_equal(bm_server_listen(f->mux, "127.0.0.1", 0), 0);
    f->mux_port = bm_server_port(f->mux);
}

static inline void fx_client_done(bm_xfer_t *x, const bm_xfer_result_t *res, void *ud)
{
    (void)x;
    fx_client_t *c = ud;
    c->done = true;
    c->err = res->err;
    c->status = res->status;
    c->end_ms = bm_clock_now_ms();
    if (res->headers)
        bm_hdrs_copy(&c->hdrs, res->headers);
    if (res->body) {
        c->body_len = res->body->len < sizeof c->body - 1 ? res->body->len : sizeof c->body - 1;
        memcpy(c->body, res->body->data, c->body_len);
        c->body[c->body_len] = '\0';
    }
}

/* A GET to beaconmux (`accept` may be NULL); runs in the background. */
static inline fx_client_t *fx_get(fx_t *f, const char *path, const char *accept)
{
    assert_true(f->n_clients < FX_MAX_CLIENTS);
    fx_client_t *c = &f->clients[f->n_clients++];
    memset(c, 0, sizeof *c);
    c->f = f;
    bm_hdrs_init(&c->hdrs);
    c->start_ms = bm_clock_now_ms();
    char url[512];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", f->mux_port, path);
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    if (accept)
        bm_hdrs_add_z(&h, "Accept", accept);
    bm_xfer_req_t xr = {.method = "GET", .url = url, .headers = &h, .timeout_ms = 20000};
    static const bm_xfer_cbs_t cbs = {.on_done = fx_client_done};
    assert_non_null(bm_upstream_start(f->up, &xr, &cbs, c));
    bm_hdrs_dispose(&h);
    return c;
}

/* Runs the loop until client `c` has its answer; asserts it came. */
static inline void fx_wait(fx_t *f, fx_client_t *c)
{
    FX_RUN_UNTIL(&f->loop, c->done, FX_BOUND_MS);
    assert_true(c->done);
    assert_int_equal(c->err, 0);
}

static inline void fx_on_srv_done(bm_server_t *srv, void *ud)
{
    (void)srv;
    *(bool *)ud = true;
}

static inline bool fx_all_done(fx_t *f)
{
    if (f->mux && !f->mux_done)
        return false;
    for (int i = 0; i < f->n_nodes; i++)
        if (!f->nodes[i].srv_done)
            return false;
    return f->preqs == 0;
}

/* Frees everything: beaconmux's server first (its requests leave their races), then the
 * engine, the policy (`policy_free`, may be NULL), the client and the fake nodes. */
static inline void fx_free(fx_t *f, void (*policy_free)(void *), void *policy)
{
    if (f->mux) {
        bm_server_shutdown(f->mux, 20, fx_on_srv_done, &f->mux_done);
        FX_RUN_UNTIL(&f->loop, f->mux_done, FX_BOUND_MS);
        assert_true(f->mux_done);
    }
    bm_race_engine_free(f->eng);
    if (policy_free)
        policy_free(policy);
    bm_upstream_free(f->up);
    for (int i = 0; i < f->n_nodes; i++)
        bm_server_shutdown(f->nodes[i].srv, 20, fx_on_srv_done, &f->nodes[i].srv_done);
    FX_RUN_UNTIL(&f->loop, fx_all_done(f), FX_BOUND_MS);
    assert_true(fx_all_done(f));
    if (f->mux)
        bm_server_free(f->mux);
    for (int i = 0; i < f->n_nodes; i++)
        bm_server_free(f->nodes[i].srv);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    for (int i = 0; i < f->n_clients; i++)
        bm_hdrs_dispose(&f->clients[i].hdrs);
    bm_router_free(f->router);
    bm_hint_free(f->hint);
    bm_pool_free(f->pool);
    free(f);
}

#endif /* BM_TEST_FRESH_FX_H */
