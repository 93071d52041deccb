/* SPDX-License-Identifier: MIT */
/*
 * h1client: the native HTTP/1.1 transport (see h1client.h for what it does and why): its
 * transfers, deferred work and API here, its nodes, pools and connections in h1conn.c
 * (shared structs in h1conn.h).
 *
 * Four kinds of objects (h1conn.h):
 *   - a node per origin as URLs spell it: the fixed part of its request heads;
 *   - a pool per host and port, which nodes with different credentials share: its
 *     connections (idle ones most recent first), its bound, the transfers waiting for a
 *     turn, the addresses;
 *   - a connection: a uv_tcp_t and a uv_timer_t (freed when both have closed), the
 *     response parser, at most one transfer (no pipelining);
 *   - a transfer (bm_xfer_t for the caller): recycled through a free list together with
 *     its header, request-head and body storage.
 *
 * Re-entrancy. Callers do everything from inside their callbacks: cancel the transfer
 * whose on_data is running, start the next request from on_done, free the client. The
 * rules that keep this safe:
 *   - user callbacks run only from libuv callbacks of this module (read, connect, timer,
 *     resolver, the deferred-work timer), never from inside a call into it; a failure
 *     found inside bm_h1client_start is queued and delivered by the deferred-work timer;
 *   - user callbacks never nest: no call into this module runs a callback synchronously,
 *     so the only transfer a callback can find on the stack is its own. A transfer
 *     cancelled from inside its own callback is marked and released when that callback
 *     returns (in_cb); any other is released at once;
 *   - connections are closed with uv_close and freed in the close callback, so a pointer
 *     held on the stack stays valid until the loop unwinds; code that called out checks
 *     whether its transfer is still attached before going on;
 *   - bm_h1client_free inside a callback marks the client dying and cancels and closes
 *     everything at once; the handles of the client itself close when the outermost
 *     libuv callback of this module returns (depth), and the memory goes when the last
 *     handle and resolver request have come back (pending).
 *
 * Timers. A connection has one timer for everything it waits for (the connect deadline,
 * its transfer's overall and idle deadlines, the idle close while pooled). It is armed
 * lazily: a later deadline is only recorded, and the timer re-arms itself when it fires
 * early, so a request on a warm connection touches the timer heap only when its deadline
 * is the earliest. The idle deadline is computed from the time of the last received byte,
 * which reading only stores. Transfers waiting for a connection are checked by one
 * client timer.
 */
#include "http/h1client.h"

#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/defaults.h"
#include "base/err.h"
#include "base/hdrs.h"
#include "base/log.h"
#include "http/h1conn.h"

#define DEFAULT_MAX_CONNECTIONS 64
#define DEFAULT_IDLE_CLOSE_MS 30000
#define DEFAULT_MAX_REQUESTS 1000
#define DEFAULT_MAX_RESPONSE ((size_t)64 << 20)

static void wait_timer_update(bm_h1client_t *c);
static void defer_arm(bm_h1client_t *c);

/* ---- transfers ---------------------------------------------------------------------- */

static h1x_t *xfer_get(bm_h1client_t *c)
{
    h1x_t *x = bm_recycle_get(&c->recycled, sizeof *x, offsetof(h1x_t, hdrs));
    if (!x)
        return NULL;
    bm_hdrs_clear(&x->hdrs); /* kept storage, or a new zeroed (empty) list */
    x->base.native = true;
    x->c = c;
    bm_link_init(&x->live);
    bm_link_init(&x->queue);
    return x;
}

static void xfer_destroy(h1x_t *x)
{
    bm_hdrs_dispose(&x->hdrs);
    bm_str_dispose(&x->head);
    bm_str_dispose(&x->body);
    free(x);
}

/* Drops what the transfer holds and recycles it. */
void bm_h1client_release(h1x_t *x)
{
    bm_h1client_t *c = x->c;
    bm_link_unlink(&x->live);
    if (x->node)
        x->node->n_xfers--;
    x->node = NULL;
    bm_buf_unref(x->req_body);
    x->req_body = NULL;
    bm_str_dispose(&x->body);
    bm_h1client_set_state(x, XS_FREE);
    /* A transfer that once carried a huge head is not worth keeping its memory for. */
    if (c->dying || bm_str_len(&x->head) >= 16 * 1024 || !bm_recycle_put(&c->recycled, x))
        xfer_destroy(x);
}

/* The URL of a transfer for a log line: the node's origin and the request target. */
static void xfer_url(const h1x_t *x, bm_str_t *out)
{
    bm_str_append(out, x->node->origin, x->node->origin_len);
    const char *line = bm_str_data(&x->head);
    const char *t = memchr(line, ' ', x->line_len);
    if (t && x->line_len > (size_t)(t + 1 - line) + sizeof " HTTP/1.1\r\n" - 1)
        bm_str_append(out, t + 1,
                      x->line_len - (size_t)(t + 1 - line) - (sizeof " HTTP/1.1\r\n" - 1));
}

/* Runs on_done and recycles the transfer, which is attached to nothing any more. Only
 * from a libuv callback of this module. */
void bm_h1client_finish(h1x_t *x)
{
    bm_h1client_t *c = x->c;
    int err = x->err;
    c->active--;
    bm_h1client_set_state(x, XS_DONE);

    char detail[256];
    bm_xfer_result_t res;
    bm_xfer_result_fill(&res,
                        &(bm_xfer_end_t){
                            .err = err,
                            .cause = x->detail ? x->detail : bm_strerror(err),
                            .stream = x->stream,
                            .head_done = x->head_done,
                            .status = x->status,
                            .hdrs = &x->hdrs,
                            .body = &x->body,
                            .start_us = x->t_start_us,
                            .head_us = x->t_head_us,
                        },
                        detail, sizeof detail);
    if (res.err && bm_log_enabled(BM_LOG_DEBUG)) {
        bm_str_t url = BM_STR_INIT;
        xfer_url(x, &url);
        bm_uprules_log_failure(&c->fail_log, x->method, bm_str_data(&url), res.err, detail);
        bm_str_dispose(&url);
    }
    if (!c->dying && x->cbs.on_done) {
        x->in_cb = true;
        x->cbs.on_done(&x->base, &res, x->ud);
        x->in_cb = false;
    }
    bm_buf_unref(res.body);
    bm_h1client_release(x);
}

/* Detaches a failing transfer from its connection (closed: its answer is unread) or
 * from the wait queue. */
static void detach_failed(h1x_t *x)
{
    conn_t *k = x->conn;
    if (k) {
        k->x = NULL;
        x->conn = NULL;
        bm_h1conn_close(k);
    } else if (x->state == XS_WAITING) {
        bm_link_unlink(&x->queue);
    }
}

/* Fails the transfer from the loop, never from the current call. */
void bm_h1client_fail_later(h1x_t *x, int err, const char *detail)
{
    bm_h1client_t *c = x->c;
    detach_failed(x);
    x->err = err;
    x->detail = detail;
    bm_h1client_set_state(x, XS_FAILING);
    bm_list_push_back(&c->fail, &x->queue);
    defer_arm(c);
}

/* Fails the transfer: on_done runs now, or from the loop inside bm_h1client_start. */
void bm_h1client_fail(h1x_t *x, int err, const char *detail)
{
    if (x->c->api > 0) {
        bm_h1client_fail_later(x, err, detail);
        return;
    }
    detach_failed(x);
    x->err = err;
    x->detail = detail;
    bm_h1client_finish(x);
}

/* After a callback of x returned: false when x must not be touched any more (it was
 * cancelled, and is released here, or the client is going away). */
bool bm_h1client_after_cb(h1x_t *x)
{
    x->in_cb = false;
    if (x->state == XS_CANCELLED) {
        bm_h1client_release(x);
        return false;
    }
    return !x->c->dying && x->state == XS_ATTACHED;
}

/* ---- deferred work ------------------------------------------------------------------ */

static void on_defer(uv_timer_t *t)
{
    bm_h1client_t *c = t->data;
    bm_h1client_enter(c);
    while (!c->dying && (!bm_list_empty(&c->fail) || !bm_list_empty(&c->resume))) {
        if (!bm_list_empty(&c->fail)) {
            h1x_t *x = bm_list_first(&c->fail, h1x_t, queue);
            bm_link_unlink(&x->queue);
            bm_h1client_finish(x);
        } else {
            conn_t *k = bm_list_first(&c->resume, conn_t, resume_link);
            bm_link_unlink(&k->resume_link);
            bm_h1conn_resume(k);
        }
    }
    bm_h1client_leave(c);
}

static void defer_arm(bm_h1client_t *c)
{
    if (!uv_is_active((uv_handle_t *)&c->defer))
        uv_timer_start(&c->defer, on_defer, 0, 0);
}

static void on_wait_timer(uv_timer_t *t)
{
    bm_h1client_t *c = t->data;
    c->wait_due = 0;
    bm_h1client_enter(c);
    uint64_t now = bm_h1client_now(c);
    for (pool_t *pl = c->pools; pl && !c->dying; pl = pl->next) {
        for (bm_link_t *l = pl->wait.next; l != &pl->wait && !c->dying;) {
            h1x_t *x = bm_list_entry(l, h1x_t, queue);
            const char *why = bm_h1conn_expired(x, now);
            if (why)
                bm_h1client_fail(x, BM_ETIMEDOUT,
                                 why); /* may run on_done: start over from the head */
            l = why ? pl->wait.next : l->next;
        }
    }
    wait_timer_update(c);
    bm_h1client_leave(c);
}

static void wait_timer_update(bm_h1client_t *c)
{
    if (c->dying)
        return;
    uint64_t d = 0;
    for (pool_t *pl = c->pools; pl; pl = pl->next)
        for (const bm_link_t *l = pl->wait.next; l != &pl->wait; l = l->next) {
            uint64_t t = bm_h1conn_xfer_deadline(bm_list_entry(l, h1x_t, queue));
            if (t && (!d || t < d))
                d = t;
        }
    if (!d || (c->wait_due && c->wait_due <= d))
        return;
    uint64_t now = bm_h1client_now(c);
    uv_timer_start(&c->wait_timer, on_wait_timer, d > now ? d - now : 0, 0);
    c->wait_due = d;
}

/* ---- the client --------------------------------------------------------------------- */

bm_h1client_t *bm_h1client_new(uv_loop_t *loop, const bm_h1client_opts_t *opts,
                               void (*on_closed)(void *ud), void *ud)
{
    bm_h1client_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->rbuf = malloc(BM_H1_READ_BUF_SIZE);
    if (!c->rbuf) {
        free(c);
        return NULL;
    }
    if (opts)
        c->opts = *opts;
    if (!c->opts.max_connections)
        c->opts.max_connections = DEFAULT_MAX_CONNECTIONS;
    if (!c->opts.idle_close_ms)
        c->opts.idle_close_ms = DEFAULT_IDLE_CLOSE_MS;
    if (!c->opts.max_requests)
        c->opts.max_requests = DEFAULT_MAX_REQUESTS;
    c->loop = loop;
    bm_link_init(&c->conns);
    bm_link_init(&c->live);
    bm_link_init(&c->fail);
    bm_link_init(&c->resume);
    c->on_closed = on_closed;
    c->closed_ud = ud;
    uv_timer_init(loop, &c->defer);
    uv_timer_init(loop, &c->wait_timer);
    c->defer.data = c;
    c->wait_timer.data = c;
    return c;
}

static void on_client_handle_closed(uv_handle_t *h)
{
    bm_h1client_t *c = h->data;
    c->pending--;
    bm_h1client_teardown(c);
}

/*
 * Closes the client's own handles once (when no callback of this module is on the
 * stack), then frees the memory once everything has come back. Called again by every
 * close callback and resolver callback until then.
 */
void bm_h1client_teardown(bm_h1client_t *c)
{
    if (!c->torn) {
        c->torn = true;
        c->pending += 2;
        uv_close((uv_handle_t *)&c->defer, on_client_handle_closed);
        uv_close((uv_handle_t *)&c->wait_timer, on_client_handle_closed);
        return;
    }
    if (c->pending > 0)
        return;
    bm_h1conn_forget_all(c);
    for (h1x_t *x; (x = bm_recycle_take(&c->recycled, 0));)
        xfer_destroy(x);
    free(c->rbuf);
    void (*cb)(void *) = c->on_closed;
    void *ud = c->closed_ud;
    free(c);
    if (cb)
        cb(ud);
}

void bm_h1client_free(bm_h1client_t *c)
{
    if (!c || c->dying)
        return;
    c->dying = true;
    /* Every transfer goes without a callback; one whose callback is running is released
     * when that returns. */
    while (!bm_list_empty(&c->live)) {
        h1x_t *x = bm_list_first(&c->live, h1x_t, live);
        bm_link_unlink(&x->live);
        bm_link_unlink(&x->queue); /* off its pool's wait list or the fail list */
        if (x->conn) {
            x->conn->x = NULL;
            x->conn = NULL;
        }
        if (x->state == XS_DONE)
            continue; /* its on_done is running; bm_h1client_finish() releases it */
        if (x->in_cb) {
            bm_h1client_set_state(x, XS_CANCELLED);
        } else {
            bm_h1client_set_state(x, XS_CANCELLED);
            bm_h1client_release(x);
        }
    }
    c->active = 0;
    while (!bm_list_empty(&c->conns))
        bm_h1conn_close(bm_list_first(&c->conns, conn_t, all_link));
    for (pool_t *pl = c->pools; pl; pl = pl->next)
        if (pl->resolving)
            uv_cancel((uv_req_t *)&pl->gai);
    if (c->depth == 0)
        bm_h1client_teardown(c);
}

size_t bm_h1client_active(const bm_h1client_t *c)
{
    return c ? c->active : 0;
}

int bm_h1client_set_node_limit(bm_h1client_t *c, const char *url, uint32_t max)
{
    bm_uprules_url_t u;
    if (!c || !url || !bm_uprules_parse_url(url, &u) || u.https)
        return BM_EINVAL;
    node_t *n = bm_h1conn_node(c, url, &u);
    if (!n)
        return BM_ENOMEM;
    pool_t *pl = n->pool;
    if (!pl)
        return BM_EINVAL;
    if (!max)
        max = c->opts.max_connections;
    pl->max_conns = pl->limit_set && pl->max_conns > max ? pl->max_conns : max;
    pl->limit_set = true;
    bm_h1conn_kick(pl);
    return 0;
}

/* Finds x a connection of its pool, or queues it for a turn. */
static void acquire(h1x_t *x)
{
    if (bm_h1conn_acquire(x))
        return;
    pool_t *pl = x->node->pool;
    bm_h1client_set_state(x, XS_WAITING);
    bm_list_push_back(&pl->wait, &x->queue);
    wait_timer_update(x->c);
}

bm_xfer_t *bm_h1client_start(bm_h1client_t *c, const bm_xfer_req_t *req, const bm_uprules_url_t *u,
                             const bm_xfer_cbs_t *cbs, void *ud)
{
    if (!c || c->dying)
        return NULL;
    node_t *n = bm_h1conn_node(c, req->url, u);
    h1x_t *x = n ? xfer_get(c) : NULL;
    if (!x)
        return NULL;
    x->node = n;
    n->n_xfers++;
    x->cbs = *cbs;
    x->ud = ud;
    x->stream = req->stream;
    x->max_bytes = req->max_response_bytes ? req->max_response_bytes : DEFAULT_MAX_RESPONSE;
    x->connect_ms =
        req->connect_timeout_ms ? req->connect_timeout_ms : BM_DEFAULT_TIMEOUTS_CONNECT_MS;
    x->timeout_ms = req->timeout_ms;
    x->idle_ms = req->idle_timeout_ms;
    size_t mlen = strlen(req->method); /* at most BM_UPRULES_METHOD_MAX: checked by the caller */
    memcpy(x->method, req->method, mlen + 1);
    bool head = strcmp(req->method, "HEAD") == 0;
    x->has_body = !head && (strcmp(req->method, "POST") == 0 || req->body);
    int rc = bm_h1req_build(&x->head, &x->line_len, req->method, u->target, req, n->o.has_auth,
                            x->has_body, x->has_body && req->body ? req->body->len : 0);
    if (rc) {
        bm_log_limited(&c->fail_log, BM_LOG_WARN, "upstream: cannot start a request: %s",
                       bm_strerror(rc));
        bm_h1client_release(x);
        return NULL;
    }
    if (x->has_body)
        x->req_body = bm_buf_ref(req->body);
    uint64_t hr = uv_hrtime();
    x->t_start_us = hr / 1000; /* CLOCK_MONOTONIC, as bm_clock_mono_us */
    x->start_ms = x->last_rx_ms = bm_h1client_deadline_base(hr);
    bm_list_push_front(&c->live, &x->live);
    c->active++;
    c->api++;
    if (n->url_err)
        bm_h1client_fail_later(x, n->url_err, "malformed URL (host or port)");
    else
        acquire(x);
    c->api--;
    return &x->base;
}

void bm_h1client_cancel(bm_xfer_t *bx)
{
    h1x_t *x = (h1x_t *)bx;
    if (!x || (x->state != XS_WAITING && x->state != XS_ATTACHED && x->state != XS_FAILING))
        return;
    bm_h1client_t *c = x->c;
    c->active--;
    if (x->state == XS_WAITING || x->state == XS_FAILING) {
        bm_link_unlink(&x->queue);
    } else if (x->conn) {
        conn_t *k = x->conn;
        k->x = NULL;
        x->conn = NULL;
        /* Sent: an answer would follow, so the connection goes. Still connecting: it
         * joins the pool once connected. */
        if (k->state == CS_OPEN)
            bm_h1conn_close(k);
    }
    bm_h1client_set_state(x, XS_CANCELLED);
    if (!x->in_cb)
        bm_h1client_release(x);
}

void bm_h1client_pause(bm_xfer_t *bx)
{
    h1x_t *x = (h1x_t *)bx;
    if (x && (x->state == XS_WAITING || x->state == XS_ATTACHED))
        x->want_paused = true; /* the next piece of body is held (see process) */
}

void bm_h1client_resume(bm_xfer_t *bx)
{
    h1x_t *x = (h1x_t *)bx;
    if (!x || (x->state != XS_WAITING && x->state != XS_ATTACHED) || !x->want_paused)
        return;
    bm_h1client_t *c = x->c;
    x->want_paused = false;
    x->last_rx_ms = bm_h1client_now(c); /* time spent paused never counts as idle */
    conn_t *k = x->conn;
    if (!k || k->state != CS_OPEN)
        return;
    if (!k->reading && !bm_link_linked(&k->resume_link)) {
        /* Held bytes are handed over from the loop: never a callback inside this call. */
        bm_list_push_back(&c->resume, &k->resume_link);
        defer_arm(c);
    }
    bm_h1conn_timer_update(k);
}
