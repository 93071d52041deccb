/* SPDX-License-Identifier: MIT */
/*
 * h1client: the native HTTP/1.1 transport (see h1client.h for what it does and why).
 *
 * Three kinds of objects:
 *   - a node per origin: the pool (idle connections, most recent first), the transfers
 *     waiting for a connection, the fixed part of the request head, the addresses;
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

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/defaults.h"
#include "base/err.h"
#include "base/hdrs.h"
#include "base/log.h"
#include "http/h1req.h"
#include "http/h1resp.h"
#include "http/upstream_impl.h"

#define DEFAULT_MAX_CONNECTIONS 64
#define DEFAULT_IDLE_CLOSE_MS 30000
#define DEFAULT_MAX_REQUESTS 1000
#define DEFAULT_MAX_RESPONSE ((size_t)64 << 20)
#define READ_BUF_SIZE (64 * 1024)
#define XFER_POOL_MAX 64
#define MAX_ADDRS 8
#define DNS_TTL_MS 60000
#define MAX_IDLE_NODES 64 /* nodes without connections kept beyond this are forgotten */
#define TCP_KEEPALIVE_S 60

typedef struct node node_t;
typedef struct pool pool_t;
typedef struct conn conn_t;
typedef struct h1x h1x_t;

typedef enum {
    XS_FREE,      /* in the free list */
    XS_WAITING,   /* waiting for a connection of its node's pool */
    XS_ATTACHED,  /* on a connection: connecting, sending or receiving */
    XS_FAILING,   /* failed inside a call into this module; on_done runs from the loop */
    XS_DONE,      /* on_done is running */
    XS_CANCELLED, /* cancelled inside its own callback; released when that returns */
} xstate_t;

typedef enum {
    CS_RESOLVING,  /* waiting for the node's addresses */
    CS_CONNECTING, /* uv_tcp_connect in progress */
    CS_OPEN,       /* connected: busy with a transfer, or idle in the pool */
    CS_CLOSED,     /* uv_close called; freed when both handles have closed */
} cstate_t;

/* Where connections go: one host and port. Nodes with different credentials for the same
 * host share it, as they share the node's TCP connections under libcurl. */
struct pool {
    bm_h1client_t *c;
    pool_t *next;
    char *hostport; /* as written in the URLs */
    size_t hostport_len;
    char host[256]; /* for the resolver */
    char port[8];
    unsigned refs; /* nodes that use this pool */
    uint32_t max_conns;
    bool limit_set;
    uint32_t n_conns; /* connections of any state but closed */
    conn_t *idle;     /* idle connections, most recently used first */
    h1x_t *wait_head, *wait_tail;
    struct sockaddr_storage addrs[MAX_ADDRS];
    int n_addrs;
    bool literal;         /* the host is an IP literal: addrs never expire */
    uint64_t addrs_until; /* loop time until which the resolved addresses are used */
    bool resolving;
    uv_getaddrinfo_t gai;
    conn_t *resolve_waiters;
};

/* What requests to one origin "http://[userinfo@]host[:port]" share: the fixed part of
 * their head (Host, Authorization) and the pool of their host. */
struct node {
    bm_h1client_t *c;
    node_t *next;
    char *origin; /* exactly as in the URLs */
    size_t origin_len;
    bm_h1req_origin_t o;
    int url_err;      /* BM_EINVAL: the origin cannot be used (bad port, host) */
    pool_t *pool;     /* NULL when url_err */
    uint32_t n_xfers; /* transfers that refer to the node */
};

struct conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    uv_connect_t connect_req;
    uv_write_t write_req;
    bm_h1client_t *c;
    pool_t *pool;
    cstate_t state;
    int open_handles;
    h1x_t *x; /* the transfer being served, or NULL */
    bm_h1resp_t *resp;
    unsigned nreq; /* responses completed on this connection */
    int addr_idx;
    uint64_t connect_deadline;
    uint64_t idle_since;
    uint64_t due; /* when the timer fires (loop time), 0 when not armed */
    bool writing;
    bool write_failed;
    bool reading;
    bool got_bytes; /* a response byte arrived for the current transfer */
    bool pooled;
    bool release_after_write; /* complete, but the write callback has not run yet */
    bool resume_queued;
    bm_buf_t *wbody; /* the request body, referenced until the write completes */
    char *held;      /* unparsed bytes kept while the transfer is paused */
    size_t held_len, held_cap;
    conn_t *pool_prev, *pool_next;
    conn_t *rw_next; /* the pool's resolve waiters */
    conn_t *resume_next;
    conn_t *all_prev, *all_next;
};

struct h1x {
    struct bm_xfer base; /* first: upstream.c dispatches on it */
    bm_h1client_t *c;
    node_t *node;
    conn_t *conn;
    xstate_t state;
    bm_xfer_cbs_t cbs;
    void *ud;
    bool stream;
    bool want_paused;
    bool head_done;
    bool retried;
    bool in_cb; /* one of its callbacks is running */
    bool live;  /* in the client's list of live transfers */
    bool has_body;
    size_t max_bytes;
    uint32_t connect_ms, timeout_ms, idle_ms;
    uint64_t t_start_us, t_head_us;
    uint64_t start_ms, last_rx_ms; /* loop time */
    bm_buf_t *req_body;
    int status;
    int err;
    const char *detail;
    char method[BM_UPRULES_METHOD_MAX + 1];
    size_t line_len; /* the request line at the start of `head` */
    h1x_t *w_prev, *w_next;
    h1x_t *f_next;
    h1x_t *a_prev, *a_next;

    /* Kept when the transfer is recycled (xfer_get clears everything above). */
    bm_hdrs_t hdrs;
    bm_str_t head; /* request line, then the per-request fields and the empty line */
    bm_str_t body; /* buffered response body */
};

struct bm_h1client {
    uv_loop_t *loop;
    bm_h1client_opts_t opts;
    node_t *nodes;
    node_t *last_node; /* the node of the last start: most requests go to the same one */
    size_t n_nodes;
    pool_t *pools;
    conn_t *conns;
    h1x_t *live;
    size_t active;
    h1x_t *xfer_pool[XFER_POOL_MAX];
    size_t n_xfer;

    unsigned depth;   /* libuv callbacks of this module on the stack */
    unsigned api;     /* bm_h1client_start on the stack: failures are deferred */
    bool dying;       /* bm_h1client_free was called */
    bool torn;        /* the client's own handles are closing */
    unsigned pending; /* closes and resolver requests still to come back */

    uv_timer_t defer; /* deferred work: failures found in calls, resumes */
    h1x_t *fail_head, *fail_tail;
    conn_t *resume_head, *resume_tail;
    uv_timer_t wait_timer; /* deadlines of transfers waiting for a connection */
    uint64_t wait_due;

    char *rbuf; /* one read buffer for every connection (reads never nest) */
    bm_log_limit_t fail_log;
    void (*on_closed)(void *ud);
    void *closed_ud;
};

static void conn_close(conn_t *k);
static void conn_open(pool_t *pl, h1x_t *x, int addr_idx, uint64_t deadline);
static void conn_send(conn_t *k);
static void conn_release(conn_t *k);
static void conn_timer_update(conn_t *k);
static void wait_timer_update(bm_h1client_t *c);
static void defer_arm(bm_h1client_t *c);
static bool process(conn_t *k, h1x_t *x, const char *p, size_t n);
static void teardown(bm_h1client_t *c);

static uint64_t now_ms(const bm_h1client_t *c)
{
    return uv_now(c->loop);
}

static void enter(bm_h1client_t *c)
{
    c->depth++;
}

static void leave(bm_h1client_t *c)
{
    if (--c->depth == 0 && c->dying && !c->torn)
        teardown(c);
}

/* ---- transfers ---------------------------------------------------------------------- */

static h1x_t *xfer_get(bm_h1client_t *c)
{
    h1x_t *x;
    if (c->n_xfer) {
        x = c->xfer_pool[--c->n_xfer];
        memset(x, 0, offsetof(h1x_t, hdrs));
    } else {
        x = calloc(1, sizeof *x);
        if (!x)
            return NULL;
        bm_hdrs_init(&x->hdrs);
    }
    x->base.native = true;
    x->c = c;
    return x;
}

static void xfer_destroy(h1x_t *x)
{
    bm_hdrs_dispose(&x->hdrs);
    bm_str_dispose(&x->head);
    bm_str_dispose(&x->body);
    free(x);
}

static void live_unlink(bm_h1client_t *c, h1x_t *x)
{
    if (!x->live)
        return;
    if (x->a_prev)
        x->a_prev->a_next = x->a_next;
    else
        c->live = x->a_next;
    if (x->a_next)
        x->a_next->a_prev = x->a_prev;
    x->a_prev = x->a_next = NULL;
    x->live = false;
}

/* Drops what the transfer holds and recycles it. */
static void release(h1x_t *x)
{
    bm_h1client_t *c = x->c;
    live_unlink(c, x);
    if (x->node)
        x->node->n_xfers--;
    x->node = NULL;
    bm_buf_unref(x->req_body);
    x->req_body = NULL;
    bm_str_dispose(&x->body);
    x->state = XS_FREE;
    if (!c->dying && c->n_xfer < XFER_POOL_MAX && bm_str_len(&x->head) < 16 * 1024) {
        bm_hdrs_clear(&x->hdrs);
        c->xfer_pool[c->n_xfer++] = x;
    } else {
        xfer_destroy(x);
    }
}

static void wait_unlink(h1x_t *x)
{
    pool_t *pl = x->node->pool;
    if (x->w_prev)
        x->w_prev->w_next = x->w_next;
    else
        pl->wait_head = x->w_next;
    if (x->w_next)
        x->w_next->w_prev = x->w_prev;
    else
        pl->wait_tail = x->w_prev;
    x->w_prev = x->w_next = NULL;
}

static void fail_unlink(bm_h1client_t *c, h1x_t *x)
{
    h1x_t **pp = &c->fail_head, *prev = NULL;
    while (*pp && *pp != x) {
        prev = *pp;
        pp = &(*pp)->f_next;
    }
    if (!*pp)
        return;
    *pp = x->f_next;
    if (c->fail_tail == x)
        c->fail_tail = prev;
    x->f_next = NULL;
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
static void finish(h1x_t *x)
{
    bm_h1client_t *c = x->c;
    int err = x->err;
    c->active--;
    x->state = XS_DONE;

    char detail[256];
    detail[0] = '\0';
    if (err)
        bm_uprules_mask(detail, sizeof detail, x->detail ? x->detail : bm_strerror(err), NULL);
    bm_buf_t *body = NULL;
    if (!x->stream && !err) {
        body = bm_str_finish(&x->body);
        if (!body) {
            err = BM_ENOMEM;
            bm_uprules_mask(detail, sizeof detail, "out of memory for the response body", NULL);
        }
    }
    if (!x->head_done)
        bm_hdrs_clear(&x->hdrs);
    uint64_t now = bm_clock_mono_us();
    bm_xfer_result_t res = {
        .err = err,
        .status = x->head_done ? x->status : 0,
        .headers = &x->hdrs,
        .body = body,
        .detail = detail,
        .elapsed_us = now - x->t_start_us,
        .ttfb_us = x->head_done ? x->t_head_us - x->t_start_us : 0,
    };
    if (err && bm_log_enabled(BM_LOG_DEBUG)) {
        bm_str_t url = BM_STR_INIT;
        xfer_url(x, &url);
        bm_uprules_log_failure(&c->fail_log, x->method, bm_str_data(&url), err, detail);
        bm_str_dispose(&url);
    }
    if (!c->dying && x->cbs.on_done) {
        x->in_cb = true;
        x->cbs.on_done(&x->base, &res, x->ud);
        x->in_cb = false;
    }
    bm_buf_unref(body);
    release(x);
}

/* Detaches a failing transfer from its connection (closed: its answer is unread) or
 * from the wait queue. */
static void detach_failed(h1x_t *x)
{
    conn_t *k = x->conn;
    if (k) {
        k->x = NULL;
        x->conn = NULL;
        conn_close(k);
    } else if (x->state == XS_WAITING) {
        wait_unlink(x);
    }
}

/* Fails the transfer from the loop, never from the current call. */
static void fail_later(h1x_t *x, int err, const char *detail)
{
    bm_h1client_t *c = x->c;
    detach_failed(x);
    x->err = err;
    x->detail = detail;
    x->state = XS_FAILING;
    x->f_next = NULL;
    if (c->fail_tail)
        c->fail_tail->f_next = x;
    else
        c->fail_head = x;
    c->fail_tail = x;
    defer_arm(c);
}

/* Fails the transfer: on_done runs now, or from the loop inside bm_h1client_start. */
static void fail_x(h1x_t *x, int err, const char *detail)
{
    if (x->c->api > 0) {
        fail_later(x, err, detail);
        return;
    }
    detach_failed(x);
    x->err = err;
    x->detail = detail;
    finish(x);
}

/* After a callback of x returned: false when x must not be touched any more (it was
 * cancelled, and is released here, or the client is going away). */
static bool after_cb(h1x_t *x)
{
    x->in_cb = false;
    if (x->state == XS_CANCELLED) {
        release(x);
        return false;
    }
    return !x->c->dying && x->state == XS_ATTACHED;
}

/* ---- nodes and pools ---------------------------------------------------------------- */

static void node_free(node_t *n)
{
    if (n->pool)
        n->pool->refs--;
    bm_h1req_origin_dispose(&n->o);
    free(n->origin);
    free(n);
}

/* Forgets nodes and pools nobody uses when there are many (URLs with ever new origins).
 * Never inside a callback of this module, whose caller may still hold one. */
static void nodes_trim(bm_h1client_t *c, node_t *keep)
{
    if (c->n_nodes <= MAX_IDLE_NODES || c->depth > 0)
        return;
    for (node_t **pp = &c->nodes; *pp;) {
        node_t *n = *pp;
        pool_t *pl = n->pool;
        bool busy = pl && (pl->n_conns || pl->wait_head || pl->resolving || pl->limit_set);
        if (n != keep && n->n_xfers == 0 && !busy) {
            *pp = n->next;
            if (c->last_node == n)
                c->last_node = NULL;
            c->n_nodes--;
            node_free(n);
        } else {
            pp = &n->next;
        }
    }
    for (pool_t **pp = &c->pools; *pp;) {
        pool_t *pl = *pp;
        if (pl->refs == 0) {
            *pp = pl->next;
            free(pl->hostport);
            free(pl);
        } else {
            pp = &pl->next;
        }
    }
}

/* The pool of a node's host, created on first use; NULL when out of memory. */
static pool_t *pool_get(bm_h1client_t *c, const node_t *n, const bm_uprules_url_t *u)
{
    pool_t *pl;
    for (pl = c->pools; pl; pl = pl->next)
        if (pl->hostport_len == u->hostport_len &&
            memcmp(pl->hostport, u->hostport, u->hostport_len) == 0)
            return pl;
    pl = calloc(1, sizeof *pl);
    if (!pl || !(pl->hostport = strndup(u->hostport, u->hostport_len))) {
        free(pl);
        return NULL;
    }
    pl->c = c;
    pl->hostport_len = u->hostport_len;
    memcpy(pl->host, n->o.host, sizeof pl->host);
    memcpy(pl->port, n->o.port, sizeof pl->port);
    pl->max_conns = c->opts.max_connections;
    int port = atoi(pl->port);
    if ((!n->o.ipv6 && uv_ip4_addr(pl->host, port, (struct sockaddr_in *)&pl->addrs[0]) == 0) ||
        (n->o.ipv6 && uv_ip6_addr(pl->host, port, (struct sockaddr_in6 *)&pl->addrs[0]) == 0)) {
        pl->literal = true;
        pl->n_addrs = 1;
    }
    pl->next = c->pools;
    c->pools = pl;
    return pl;
}

/* The node of a URL's origin, created on first use; NULL when out of memory. */
static node_t *node_get(bm_h1client_t *c, const char *url, const bm_uprules_url_t *u)
{
    size_t ol = u->origin_len;
    node_t *n = c->last_node;
    if (n && n->origin_len == ol && memcmp(n->origin, url, ol) == 0)
        return n;
    for (n = c->nodes; n; n = n->next)
        if (n->origin_len == ol && memcmp(n->origin, url, ol) == 0)
            return c->last_node = n;
    n = calloc(1, sizeof *n);
    if (!n)
        return NULL;
    n->c = c;
    n->origin = strndup(url, ol);
    n->origin_len = ol;
    int rc = n->origin ? bm_h1req_origin(&n->o, u) : BM_ENOMEM;
    if (!rc && n->o.ipv6 && !strchr(n->o.host, ':'))
        rc = BM_EINVAL; /* brackets around something that is not an IPv6 address */
    if (!rc && !(n->pool = pool_get(c, n, u)))
        rc = BM_ENOMEM;
    if (rc == BM_ENOMEM) {
        node_free(n);
        return NULL;
    }
    n->url_err = rc;
    if (n->pool) {
        n->pool->refs++;
        if (n->o.ipv6 && !n->pool->literal)
            n->url_err = BM_EINVAL;
    }
    n->next = c->nodes;
    c->nodes = n;
    c->n_nodes++;
    nodes_trim(c, n);
    return c->last_node = n;
}

static bool addrs_fresh(const pool_t *pl)
{
    return pl->literal || (pl->n_addrs > 0 && now_ms(pl->c) < pl->addrs_until);
}

static void conn_connect(conn_t *k);

/* Connections that waited for the addresses: connect, or fail when there are none. */
static void resolve_waiters_go(pool_t *pl)
{
    bm_h1client_t *c = pl->c;
    conn_t *w = pl->resolve_waiters;
    pl->resolve_waiters = NULL;
    while (w && !c->dying) {
        conn_t *next = w->rw_next;
        w->rw_next = NULL;
        if (w->state == CS_RESOLVING) {
            if (pl->n_addrs > 0) {
                conn_connect(w);
            } else {
                h1x_t *x = w->x;
                if (x)
                    fail_x(x, BM_ECONNREFUSED, "could not resolve the host name");
                else
                    conn_close(w);
            }
        }
        w = next;
    }
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    pool_t *pl = req->data;
    bm_h1client_t *c = pl->c;
    pl->resolving = false;
    c->pending--;
    if (c->dying) {
        uv_freeaddrinfo(res);
        if (c->torn)
            teardown(c); /* the last thing the client waited for, perhaps */
        return;
    }
    enter(c);
    pl->n_addrs = 0;
    for (struct addrinfo *a = status == 0 ? res : NULL; a && pl->n_addrs < MAX_ADDRS;
         a = a->ai_next) {
        if ((a->ai_family == AF_INET || a->ai_family == AF_INET6) &&
            a->ai_addrlen <= sizeof pl->addrs[0])
            memcpy(&pl->addrs[pl->n_addrs++], a->ai_addr, a->ai_addrlen);
    }
    uv_freeaddrinfo(res);
    pl->addrs_until = now_ms(c) + DNS_TTL_MS;
    resolve_waiters_go(pl);
    leave(c);
}

/* Starts resolving the pool's host name, once for every connection waiting for it. */
static void pool_resolve(pool_t *pl)
{
    bm_h1client_t *c = pl->c;
    if (pl->resolving)
        return;
    struct addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    pl->gai.data = pl;
    if (uv_getaddrinfo(c->loop, &pl->gai, on_resolved, pl->host, pl->port, &hints) != 0) {
        conn_t *w = pl->resolve_waiters;
        pl->resolve_waiters = NULL;
        while (w) {
            conn_t *next = w->rw_next;
            w->rw_next = NULL;
            if (w->x)
                fail_later(w->x, BM_ECONNREFUSED, "could not resolve the host name");
            else
                conn_close(w);
            w = next;
        }
        return;
    }
    pl->resolving = true;
    c->pending++;
}

/* Opens connections for waiting transfers while the pool has room. */
static void pool_kick_waiters(pool_t *pl)
{
    while (pl->wait_head && pl->n_conns < pl->max_conns && !pl->c->dying) {
        h1x_t *x = pl->wait_head;
        wait_unlink(x);
        conn_open(pl, x, 0, 0);
    }
}

/* ---- connections -------------------------------------------------------------------- */

static void attach(h1x_t *x, conn_t *k)
{
    x->state = XS_ATTACHED;
    x->conn = k;
    k->x = x;
    k->got_bytes = false;
    bm_h1resp_reset(k->resp, strcmp(x->method, "HEAD") == 0, &x->hdrs);
}

static void pool_remove(conn_t *k)
{
    if (k->pool_prev)
        k->pool_prev->pool_next = k->pool_next;
    else
        k->pool->idle = k->pool_next;
    if (k->pool_next)
        k->pool_next->pool_prev = k->pool_prev;
    k->pool_prev = k->pool_next = NULL;
    k->pooled = false;
}

static void on_conn_closed(uv_handle_t *h)
{
    conn_t *k = h->data;
    if (--k->open_handles > 0)
        return;
    bm_h1client_t *c = k->c;
    bm_h1resp_free(k->resp);
    bm_buf_unref(k->wbody);
    free(k->held);
    free(k);
    c->pending--;
    if (c->torn)
        teardown(c);
}

static void resume_unlink(bm_h1client_t *c, conn_t *k)
{
    conn_t **pp = &c->resume_head, *prev = NULL;
    while (*pp && *pp != k) {
        prev = *pp;
        pp = &(*pp)->resume_next;
    }
    if (*pp) {
        *pp = k->resume_next;
        if (c->resume_tail == k)
            c->resume_tail = prev;
    }
    k->resume_next = NULL;
    k->resume_queued = false;
}

static void conn_close(conn_t *k)
{
    if (k->state == CS_CLOSED)
        return;
    bm_h1client_t *c = k->c;
    pool_t *pl = k->pool;
    if (k->pooled)
        pool_remove(k);
    if (k->state == CS_RESOLVING) {
        for (conn_t **pp = &pl->resolve_waiters; *pp; pp = &(*pp)->rw_next)
            if (*pp == k) {
                *pp = k->rw_next;
                break;
            }
    }
    if (k->resume_queued)
        resume_unlink(c, k);
    if (k->x) {
        k->x->conn = NULL;
        k->x = NULL;
    }
    k->state = CS_CLOSED;
    if (k->all_prev)
        k->all_prev->all_next = k->all_next;
    else
        c->conns = k->all_next;
    if (k->all_next)
        k->all_next->all_prev = k->all_prev;
    pl->n_conns--;
    c->pending++;
    k->open_handles = 2;
    uv_close((uv_handle_t *)&k->tcp, on_conn_closed);
    uv_close((uv_handle_t *)&k->timer, on_conn_closed);
    pool_kick_waiters(pl);
}

static void on_conn_timer(uv_timer_t *t);

/* The earliest deadline of the connection, 0 when it has none. */
static uint64_t conn_deadline(const conn_t *k)
{
    uint64_t d = 0;
    if (k->state == CS_RESOLVING || k->state == CS_CONNECTING)
        d = k->connect_deadline;
    const h1x_t *x = k->x;
    if (x) {
        if (x->timeout_ms) {
            uint64_t t = x->start_ms + x->timeout_ms;
            d = d && d < t ? d : t;
        }
        if (x->idle_ms && !x->want_paused) {
            uint64_t t = x->last_rx_ms + x->idle_ms;
            d = d && d < t ? d : t;
        }
    } else if (k->pooled) {
        uint64_t t = k->idle_since + k->c->opts.idle_close_ms;
        d = d && d < t ? d : t;
    }
    return d;
}

static void conn_timer_update(conn_t *k)
{
    uint64_t d = conn_deadline(k);
    if (!d || (k->due && k->due <= d))
        return; /* none, or the armed timer fires first and re-arms itself */
    uint64_t now = now_ms(k->c);
    uv_timer_start(&k->timer, on_conn_timer, d > now ? d - now : 0, 0);
    k->due = d;
}

/* What expired for a transfer at `now`, or NULL. */
static const char *expired(h1x_t *x, uint64_t now)
{
    if (x->timeout_ms && now >= x->start_ms + x->timeout_ms)
        return "no complete response within timeout_ms";
    if (x->idle_ms && x->want_paused)
        x->last_rx_ms = now; /* the silence is ours, not the node's */
    else if (x->idle_ms && now >= x->last_rx_ms + x->idle_ms)
        return "no data received within idle_timeout_ms";
    return NULL;
}

static void on_conn_timer(uv_timer_t *t)
{
    conn_t *k = t->data;
    bm_h1client_t *c = k->c;
    k->due = 0;
    if (k->state == CS_CLOSED)
        return;
    enter(c);
    uint64_t now = now_ms(c);
    h1x_t *x = k->x;
    const char *why;
    if ((k->state == CS_RESOLVING || k->state == CS_CONNECTING) && now >= k->connect_deadline) {
        if (x)
            fail_x(x, BM_ETIMEDOUT, "connect timed out (connect_timeout_ms)");
        else
            conn_close(k);
    } else if (x && (why = expired(x, now)) != NULL) {
        fail_x(x, BM_ETIMEDOUT, why);
    } else if (!x && k->pooled && now >= k->idle_since + c->opts.idle_close_ms) {
        conn_close(k);
    } else {
        conn_timer_update(k);
    }
    leave(c);
}

/* A connection that failed to connect: the next address within the deadline, or fail. */
static void connect_failed(conn_t *k, int uv_err, bool in_call)
{
    pool_t *pl = k->pool;
    h1x_t *x = k->x;
    if (x && k->addr_idx + 1 < pl->n_addrs && now_ms(k->c) < k->connect_deadline && !k->c->dying) {
        k->x = NULL;
        x->conn = NULL;
        conn_open(pl, x, k->addr_idx + 1, k->connect_deadline);
        conn_close(k);
        return;
    }
    int err = uv_err == UV_ETIMEDOUT ? BM_ETIMEDOUT : BM_ECONNREFUSED;
    const char *detail = uv_err == UV_ECONNREFUSED   ? "connection refused"
                         : uv_err == UV_ETIMEDOUT    ? "connect timed out"
                         : uv_err == UV_ENETUNREACH  ? "network unreachable"
                         : uv_err == UV_EHOSTUNREACH ? "host unreachable"
                                                     : "could not connect";
    if (!x)
        conn_close(k);
    else if (in_call)
        fail_later(x, err, detail);
    else
        fail_x(x, err, detail);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    (void)suggested;
    conn_t *k = h->data;
    b->base = k->c->rbuf;
    b->len = READ_BUF_SIZE;
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b);

static void read_start(conn_t *k)
{
    if (!k->reading && uv_read_start((uv_stream_t *)&k->tcp, on_alloc, on_read) == 0)
        k->reading = true;
}

static void on_connect(uv_connect_t *req, int status)
{
    conn_t *k = req->data;
    bm_h1client_t *c = k->c;
    if (k->state != CS_CONNECTING)
        return; /* closed meanwhile (status is UV_ECANCELED) */
    enter(c);
    if (status < 0) {
        connect_failed(k, status, false);
    } else {
        uv_tcp_nodelay(&k->tcp, 1);
        uv_tcp_keepalive(&k->tcp, 1, TCP_KEEPALIVE_S);
        k->state = CS_OPEN;
        read_start(k);
        if (k->x)
            conn_send(k);
        else
            conn_release(k); /* its transfer was cancelled: a spare connection */
    }
    leave(c);
}

static void conn_connect(conn_t *k)
{
    pool_t *pl = k->pool;
    k->state = CS_CONNECTING;
    k->connect_req.data = k;
    int rc = k->addr_idx < pl->n_addrs
                 ? uv_tcp_connect(&k->connect_req, &k->tcp,
                                  (const struct sockaddr *)&pl->addrs[k->addr_idx], on_connect)
                 : UV_ECONNREFUSED;
    if (rc)
        connect_failed(k, rc, true);
}

/* Opens a connection for x (to the pool's address addr_idx), bypassing the idle ones. */
static void conn_open(pool_t *pl, h1x_t *x, int addr_idx, uint64_t deadline)
{
    bm_h1client_t *c = pl->c;
    conn_t *k = calloc(1, sizeof *k);
    bm_h1resp_t *resp = k ? bm_h1resp_new(BM_UPRULES_MAX_HEAD_BYTES) : NULL;
    if (!resp) {
        free(k);
        fail_later(x, BM_ENOMEM, "out of memory for a connection");
        return;
    }
    k->resp = resp;
    k->c = c;
    k->pool = pl;
    uv_tcp_init(c->loop, &k->tcp);
    uv_timer_init(c->loop, &k->timer);
    k->tcp.data = k;
    k->timer.data = k;
    k->all_next = c->conns;
    if (c->conns)
        c->conns->all_prev = k;
    c->conns = k;
    pl->n_conns++;
    k->addr_idx = addr_idx;
    k->connect_deadline = deadline ? deadline : now_ms(c) + x->connect_ms;
    attach(x, k);
    if (addrs_fresh(pl)) {
        conn_connect(k);
    } else {
        k->state = CS_RESOLVING;
        k->rw_next = pl->resolve_waiters;
        pl->resolve_waiters = k;
        pool_resolve(pl);
    }
    if (k->state != CS_CLOSED)
        conn_timer_update(k);
}

/* An open connection without a transfer: to the first waiting transfer, or the pool. */
static void conn_release(conn_t *k)
{
    bm_h1client_t *c = k->c;
    pool_t *pl = k->pool;
    if (c->dying || k->nreq >= c->opts.max_requests) {
        conn_close(k);
        return;
    }
    read_start(k);
    if (pl->wait_head) {
        h1x_t *x = pl->wait_head;
        wait_unlink(x);
        attach(x, k);
        conn_send(k);
        return;
    }
    k->pooled = true;
    k->idle_since = now_ms(c);
    k->pool_prev = NULL;
    k->pool_next = pl->idle;
    if (pl->idle)
        pl->idle->pool_prev = k;
    pl->idle = k;
    conn_timer_update(k);
}

static void on_write(uv_write_t *req, int status)
{
    conn_t *k = req->data;
    bm_h1client_t *c = k->c;
    k->writing = false;
    bm_buf_unref(k->wbody);
    k->wbody = NULL;
    if (k->state == CS_CLOSED)
        return;
    enter(c);
    if (status < 0) {
        /* Nothing to decide here: a failed write means the node closed or reset the
         * connection, which the read side reports next, after any answer the node sent
         * before it stopped reading (a 413 for a body it did not want). */
        k->write_failed = true;
        if (!k->x)
            conn_close(k);
    } else if (k->release_after_write) {
        k->release_after_write = false;
        conn_release(k);
    }
    leave(c);
}

/* Sends the request of the connection's transfer: its request line, the node's fixed
 * fields, its own fields and the body, with one writev. What the kernel does not take at
 * once goes to one uv_write (a try first: a uv_write that completes at once still costs an
 * epoll_ctl and a pending callback in libuv 1.44). */
static void conn_send(conn_t *k)
{
    h1x_t *x = k->x;
    const char *h = bm_str_data(&x->head);
    size_t hl = bm_str_len(&x->head);
    const bm_str_t *fixed = &x->node->o.fixed;
    uv_buf_t b[4];
    unsigned nb = 0;
    b[nb++] = uv_buf_init((char *)h, (unsigned)x->line_len);
    b[nb++] = uv_buf_init((char *)bm_str_data(fixed), (unsigned)bm_str_len(fixed));
    b[nb++] = uv_buf_init((char *)h + x->line_len, (unsigned)(hl - x->line_len));
    if (x->req_body && x->req_body->len)
        b[nb++] = uv_buf_init(x->req_body->data, (unsigned)x->req_body->len);
    k->write_failed = false;
    int sent = uv_try_write((uv_stream_t *)&k->tcp, b, nb);
    if (sent == UV_EAGAIN)
        sent = 0;
    if (sent < 0) {
        /* The node closed or reset the connection: the read side reports it next (and a
         * reused connection gets the request sent again). */
        k->write_failed = true;
        conn_timer_update(k);
        return;
    }
    size_t left = (size_t)sent;
    unsigned first = 0;
    while (first < nb && left >= b[first].len)
        left -= b[first++].len;
    if (first == nb) {
        conn_timer_update(k);
        return; /* all of it went out */
    }
    b[first].base += left;
    b[first].len -= left;
    k->write_req.data = k;
    if (uv_write(&k->write_req, (uv_stream_t *)&k->tcp, b + first, nb - first, on_write) != 0) {
        /* libuv refuses only a handle it cannot write to: treat it as a reset */
        conn_close(k);
        fail_later(x, BM_ECONNRESET, "could not send the request");
        return;
    }
    k->writing = true;
    k->wbody = bm_buf_ref(x->req_body);
    conn_timer_update(k);
}

/* ---- responses ---------------------------------------------------------------------- */

/* The response is complete: recycle or close the connection, then on_done. */
static void complete(conn_t *k, h1x_t *x, bool trailing)
{
    bm_h1client_t *c = k->c;
    /* A write still in progress means the node answered before reading the whole body. */
    bool sent = !k->writing || k->tcp.write_queue_size == 0;
    bool reuse =
        bm_h1resp_keep_alive(k->resp) && !trailing && !k->write_failed && sent && !c->dying;
    k->x = NULL;
    x->conn = NULL;
    k->nreq++;
    if (!reuse)
        conn_close(k);
    else if (k->writing)
        k->release_after_write = true;
    else
        conn_release(k);
    x->err = 0;
    finish(x);
}

/* The final head arrived. False when the transfer ended (failed, or cancelled in on_head). */
static bool deliver_head(conn_t *k, h1x_t *x)
{
    int64_t blen = bm_h1resp_body_length(k->resp);
    if (!x->stream && blen > 0 && (uint64_t)blen > x->max_bytes) {
        fail_x(x, BM_ETOOBIG, "response body larger than max_response_bytes");
        return false;
    }
    x->status = bm_h1resp_status(k->resp);
    x->head_done = true;
    x->t_head_us = bm_clock_mono_us();
    if (!x->stream && blen > 0 && x->status >= 200 && x->status < 300 && !x->body.b)
        x->body.b = bm_buf_new((size_t)blen); /* one allocation for the whole body */
    if (!x->cbs.on_head)
        return true;
    x->in_cb = true;
    x->cbs.on_head(&x->base, x->status, &x->hdrs, x->ud);
    return after_cb(x);
}

/* A piece of body. False when the transfer ended. */
static bool deliver_data(h1x_t *x, const char *p, size_t n)
{
    if (!x->stream) {
        if (n > x->max_bytes - bm_str_len(&x->body)) {
            fail_x(x, BM_ETOOBIG, "response body larger than max_response_bytes");
            return false;
        }
        bm_str_append(&x->body, p, n);
        if (x->body.oom) {
            fail_x(x, BM_ENOMEM, "out of memory for the response body");
            return false;
        }
        return true;
    }
    x->in_cb = true;
    int rc = x->cbs.on_data(&x->base, p, n, x->ud);
    if (!after_cb(x))
        return false;
    if (rc == BM_XFER_PAUSE)
        x->want_paused = true;
    return true;
}

/* Keeps p[0..n) for after the resume and stops reading. p may point into k->held. */
static void hold(conn_t *k, const char *p, size_t n)
{
    if (n > k->held_cap) {
        char *h = malloc(n);
        if (!h) {
            fail_x(k->x, BM_ENOMEM, "out of memory while paused");
            return;
        }
        free(k->held);
        k->held = h;
        k->held_cap = n;
    }
    memmove(k->held, p, n);
    k->held_len = n;
    if (k->reading) {
        uv_read_stop((uv_stream_t *)&k->tcp);
        k->reading = false;
    }
}

/*
 * Parses p[0..n) for the connection's transfer and runs its callbacks. True when the
 * transfer is still attached and waits for more bytes (all consumed, or held because it
 * is paused); false when it ended or went away.
 */
static bool process(conn_t *k, h1x_t *x, const char *p, size_t n)
{
    size_t off = 0;
    for (;;) {
        if (x->want_paused && x->head_done) {
            hold(k, p + off, n - off);
            return k->x == x;
        }
        size_t used, len;
        const char *data;
        bm_h1resp_ev_t ev = bm_h1resp_next(k->resp, p + off, n - off, &used, &data, &len);
        off += used;
        switch (ev) {
        case BM_H1RESP_MORE:
            return true;
        case BM_H1RESP_HEAD:
            if (!deliver_head(k, x))
                return false;
            break;
        case BM_H1RESP_DATA:
            if (!deliver_data(x, data, len))
                return false;
            break;
        case BM_H1RESP_DONE:
            complete(k, x, off < n);
            return false;
        case BM_H1RESP_ERROR: {
            const char *detail;
            int err = bm_h1resp_error(k->resp, &detail);
            fail_x(x, err, detail);
            return false;
        }
        }
    }
}

/* The request went out on a reused connection and it broke before any answer: send it
 * once more on a fresh connection, or fail. */
static void retry_or_fail(conn_t *k, h1x_t *x, const char *detail)
{
    if (k->nreq > 0 && !x->retried && !k->c->dying) {
        x->retried = true;
        k->x = NULL;
        x->conn = NULL;
        conn_open(k->pool, x, 0, 0);
        conn_close(k);
        return;
    }
    fail_x(x, BM_ECONNRESET, detail);
}

/* The connection's read side ended (EOF or an error). */
static void conn_read_end(conn_t *k, int uv_err)
{
    h1x_t *x = k->x;
    if (!x) {
        conn_close(k); /* an idle connection the node closed */
        return;
    }
    if (!k->got_bytes) {
        retry_or_fail(k, x,
                      uv_err == UV_EOF ? "connection closed before any response"
                                       : "connection reset before any response");
        return;
    }
    if (uv_err != UV_EOF) {
        fail_x(x, BM_ECONNRESET, "connection reset inside the response");
        return;
    }
    if (bm_h1resp_eof(k->resp) == BM_H1RESP_DONE) {
        complete(k, x, false); /* a body delimited by the close */
        return;
    }
    const char *detail;
    int err = bm_h1resp_error(k->resp, &detail);
    fail_x(x, err, detail);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    conn_t *k = s->data;
    bm_h1client_t *c = k->c;
    if (nread == 0 || k->state != CS_OPEN)
        return;
    enter(c);
    h1x_t *x = k->x;
    if (nread < 0) {
        conn_read_end(k, (int)nread);
    } else if (!x) {
        conn_close(k); /* bytes nobody asked for: the connection cannot be trusted */
    } else {
        k->got_bytes = true;
        x->last_rx_ms = now_ms(c);
        process(k, x, b->base, (size_t)nread);
    }
    leave(c);
}

/* Hands the held bytes to a resumed transfer and reads again. From the loop. */
static void conn_resume(conn_t *k)
{
    h1x_t *x = k->x;
    if (!x || k->state != CS_OPEN || x->want_paused)
        return;
    size_t n = k->held_len;
    k->held_len = 0;
    if (n && !process(k, x, k->held, n))
        return;
    if (!x->want_paused)
        read_start(k);
}

/* ---- deferred work ------------------------------------------------------------------ */

static void on_defer(uv_timer_t *t)
{
    bm_h1client_t *c = t->data;
    enter(c);
    while (!c->dying && (c->fail_head || c->resume_head)) {
        if (c->fail_head) {
            h1x_t *x = c->fail_head;
            c->fail_head = x->f_next;
            if (!c->fail_head)
                c->fail_tail = NULL;
            x->f_next = NULL;
            finish(x);
        } else {
            conn_t *k = c->resume_head;
            resume_unlink(c, k);
            conn_resume(k);
        }
    }
    leave(c);
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
    enter(c);
    uint64_t now = now_ms(c);
    for (pool_t *pl = c->pools; pl && !c->dying; pl = pl->next) {
        for (h1x_t *x = pl->wait_head; x && !c->dying;) {
            h1x_t *next = x->w_next;
            const char *why = expired(x, now);
            if (why)
                fail_x(x, BM_ETIMEDOUT, why); /* may run on_done: start over from the head */
            x = why ? pl->wait_head : next;
        }
    }
    wait_timer_update(c);
    leave(c);
}

static void wait_timer_update(bm_h1client_t *c)
{
    if (c->dying)
        return;
    uint64_t d = 0;
    for (pool_t *pl = c->pools; pl; pl = pl->next)
        for (h1x_t *x = pl->wait_head; x; x = x->w_next) {
            if (x->timeout_ms) {
                uint64_t t = x->start_ms + x->timeout_ms;
                d = d && d < t ? d : t;
            }
            if (x->idle_ms && !x->want_paused) {
                uint64_t t = x->last_rx_ms + x->idle_ms;
                d = d && d < t ? d : t;
            }
        }
    if (!d || (c->wait_due && c->wait_due <= d))
        return;
    uint64_t now = now_ms(c);
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
    c->rbuf = malloc(READ_BUF_SIZE);
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
    teardown(c);
}

/*
 * Closes the client's own handles once (when no callback of this module is on the
 * stack), then frees the memory once everything has come back. Called again by every
 * close callback and resolver callback until then.
 */
static void teardown(bm_h1client_t *c)
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
    while (c->nodes) {
        node_t *n = c->nodes;
        c->nodes = n->next;
        node_free(n);
    }
    while (c->pools) {
        pool_t *pl = c->pools;
        c->pools = pl->next;
        free(pl->hostport);
        free(pl);
    }
    while (c->n_xfer)
        xfer_destroy(c->xfer_pool[--c->n_xfer]);
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
    while (c->live) {
        h1x_t *x = c->live;
        live_unlink(c, x);
        if (x->state == XS_WAITING)
            wait_unlink(x);
        else if (x->state == XS_FAILING)
            fail_unlink(c, x);
        if (x->conn) {
            x->conn->x = NULL;
            x->conn = NULL;
        }
        if (x->state == XS_DONE)
            continue; /* its on_done is running; finish() releases it */
        if (x->in_cb) {
            x->state = XS_CANCELLED;
        } else {
            x->state = XS_CANCELLED;
            release(x);
        }
    }
    c->active = 0;
    while (c->conns)
        conn_close(c->conns);
    for (pool_t *pl = c->pools; pl; pl = pl->next)
        if (pl->resolving)
            uv_cancel((uv_req_t *)&pl->gai);
    if (c->depth == 0)
        teardown(c);
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
    node_t *n = node_get(c, url, &u);
    if (!n)
        return BM_ENOMEM;
    pool_t *pl = n->pool;
    if (!pl)
        return BM_EINVAL;
    if (!max)
        max = c->opts.max_connections;
    pl->max_conns = pl->limit_set && pl->max_conns > max ? pl->max_conns : max;
    pl->limit_set = true;
    pool_kick_waiters(pl);
    return 0;
}

/* Finds x a connection of its pool: an idle one, a new one, or a turn. */
static void acquire(h1x_t *x)
{
    pool_t *pl = x->node->pool;
    conn_t *k = pl->idle;
    if (k) {
        pool_remove(k);
        attach(x, k);
        conn_send(k);
    } else if (pl->n_conns < pl->max_conns) {
        conn_open(pl, x, 0, 0);
    } else {
        x->state = XS_WAITING;
        x->w_next = NULL;
        x->w_prev = pl->wait_tail;
        if (pl->wait_tail)
            pl->wait_tail->w_next = x;
        else
            pl->wait_head = x;
        pl->wait_tail = x;
        wait_timer_update(x->c);
    }
}

bm_xfer_t *bm_h1client_start(bm_h1client_t *c, const bm_xfer_req_t *req, const bm_uprules_url_t *u,
                             const bm_xfer_cbs_t *cbs, void *ud)
{
    if (!c || c->dying)
        return NULL;
    node_t *n = node_get(c, req->url, u);
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
        release(x);
        return NULL;
    }
    if (x->has_body)
        x->req_body = bm_buf_ref(req->body);
    x->t_start_us = bm_clock_mono_us();
    x->start_ms = x->last_rx_ms = now_ms(c);
    x->live = true;
    x->a_next = c->live;
    if (c->live)
        c->live->a_prev = x;
    c->live = x;
    c->active++;
    c->api++;
    if (n->url_err)
        fail_later(x, n->url_err, "malformed URL (host or port)");
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
    if (x->state == XS_WAITING) {
        wait_unlink(x);
    } else if (x->state == XS_FAILING) {
        fail_unlink(c, x);
    } else if (x->conn) {
        conn_t *k = x->conn;
        k->x = NULL;
        x->conn = NULL;
        /* Sent: an answer would follow, so the connection goes. Still connecting: it
         * joins the pool once connected. */
        if (k->state == CS_OPEN)
            conn_close(k);
    }
    x->state = XS_CANCELLED;
    if (!x->in_cb)
        release(x);
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
    x->last_rx_ms = now_ms(c); /* time spent paused never counts as idle */
    conn_t *k = x->conn;
    if (!k || k->state != CS_OPEN)
        return;
    if (!k->reading && !k->resume_queued) {
        /* Held bytes are handed over from the loop: never a callback inside this call. */
        k->resume_queued = true;
        k->resume_next = NULL;
        if (c->resume_tail)
            c->resume_tail->resume_next = k;
        else
            c->resume_head = k;
        c->resume_tail = k;
        defer_arm(c);
    }
    conn_timer_update(k);
}
