/* SPDX-License-Identifier: MIT */
/*
 * h1conn: the nodes, pools and connections of the native HTTP/1.1 client (h1client.c
 * has the transfers and the API; the rules of lifetime and re-entrancy are at its top).
 *
 * A node is an origin as URLs spell it ("http://user@host:port"): the fixed part of its
 * request heads. A pool is a host and port: its connections (idle ones last in, first
 * out), its bound, its transfers waiting for a turn, its addresses (resolved with
 * uv_getaddrinfo and kept a minute, or an IP literal). A connection carries one exchange
 * at a time: it writes the request with one writev, reads into the client's shared
 * buffer, parses with h1resp and runs the transfer's callbacks; a paused transfer's
 * unparsed bytes are kept on the connection and reading stops until the resume.
 */
#include "http/h1conn.h"

#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/hdrs.h"
#include "base/log.h"
#include "http/uprules.h"

#define DNS_TTL_MS 60000
#define MAX_IDLE_NODES 64 /* nodes without connections kept beyond this are forgotten */
#define TCP_KEEPALIVE_S 60

static void conn_send(conn_t *k);
static void conn_release(conn_t *k);
static bool process(conn_t *k, h1x_t *x, const char *p, size_t n);

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
        bool busy =
            pl && (pl->n_conns || !bm_list_empty(&pl->wait) || pl->resolving || pl->limit_set);
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
    bm_link_init(&pl->idle);
    bm_link_init(&pl->wait);
    bm_link_init(&pl->resolve_waiters);
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
node_t *bm_h1conn_node(bm_h1client_t *c, const char *url, const bm_uprules_url_t *u)
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
    return pl->literal || (pl->n_addrs > 0 && bm_h1client_now(pl->c) < pl->addrs_until);
}

static void conn_connect(conn_t *k);

/*
 * Connections that waited for the addresses: connect, or fail when there are none. The
 * waiters are taken off the pool first: a failure runs on_done, whose new requests may
 * wait for a lookup of their own. A waiter closed meanwhile leaves the taken list.
 */
static void resolve_waiters_go(pool_t *pl)
{
    bm_h1client_t *c = pl->c;
    bm_link_t taken;
    bm_link_init(&taken);
    bm_list_move_all(&taken, &pl->resolve_waiters);
    while (!bm_list_empty(&taken)) {
        conn_t *w = bm_list_first(&taken, conn_t, rw_link);
        bm_link_unlink(&w->rw_link);
        if (c->dying || w->state != CS_RESOLVING)
            continue; /* the client closes it (or already did) */
        if (pl->n_addrs > 0) {
            conn_connect(w);
        } else {
            h1x_t *x = w->x;
            if (x)
                bm_h1client_fail(x, BM_ECONNREFUSED, "could not resolve the host name");
            else
                bm_h1conn_close(w);
        }
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
            bm_h1client_teardown(c); /* the last thing the client waited for, perhaps */
        return;
    }
    bm_h1client_enter(c);
    pl->n_addrs = 0;
    for (struct addrinfo *a = status == 0 ? res : NULL; a && pl->n_addrs < BM_H1_MAX_ADDRS;
         a = a->ai_next) {
        if ((a->ai_family == AF_INET || a->ai_family == AF_INET6) &&
            a->ai_addrlen <= sizeof pl->addrs[0])
            memcpy(&pl->addrs[pl->n_addrs++], a->ai_addr, a->ai_addrlen);
    }
    uv_freeaddrinfo(res);
    pl->addrs_until = bm_h1client_now(c) + DNS_TTL_MS;
    resolve_waiters_go(pl);
    bm_h1client_leave(c);
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
        bm_link_t taken; /* closing one may open another, which waits anew */
        bm_link_init(&taken);
        bm_list_move_all(&taken, &pl->resolve_waiters);
        while (!bm_list_empty(&taken)) {
            conn_t *w = bm_list_first(&taken, conn_t, rw_link);
            bm_link_unlink(&w->rw_link);
            if (w->x)
                bm_h1client_fail_later(w->x, BM_ECONNREFUSED, "could not resolve the host name");
            else
                bm_h1conn_close(w);
        }
        return;
    }
    pl->resolving = true;
    c->pending++;
}

/* Opens connections for waiting transfers while the pool has room. */
void bm_h1conn_kick(pool_t *pl)
{
    while (!bm_list_empty(&pl->wait) && pl->n_conns < pl->max_conns && !pl->c->dying) {
        h1x_t *x = bm_list_first(&pl->wait, h1x_t, queue);
        bm_link_unlink(&x->queue);
        bm_h1conn_open(pl, x, 0, 0);
    }
}

/* ---- connections -------------------------------------------------------------------- */

static void attach(h1x_t *x, conn_t *k)
{
    bm_h1client_set_state(x, XS_ATTACHED);
    x->conn = k;
    k->x = x;
    k->got_bytes = false;
    bm_h1resp_reset(k->resp, strcmp(x->method, "HEAD") == 0, &x->hdrs);
}

static void pool_remove(conn_t *k)
{
    bm_link_unlink(&k->pool_link);
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
        bm_h1client_teardown(c);
}

void bm_h1conn_close(conn_t *k)
{
    if (k->state == CS_CLOSED)
        return;
    bm_h1client_t *c = k->c;
    pool_t *pl = k->pool;
    if (k->pooled)
        pool_remove(k);
    bm_link_unlink(&k->rw_link);
    bm_link_unlink(&k->resume_link);
    if (k->x) {
        k->x->conn = NULL;
        k->x = NULL;
    }
    bm_h1conn_set_state(k, CS_CLOSED);
    bm_link_unlink(&k->all_link);
    pl->n_conns--;
    c->pending++;
    k->open_handles = 2;
    uv_close((uv_handle_t *)&k->tcp, on_conn_closed);
    uv_close((uv_handle_t *)&k->timer, on_conn_closed);
    bm_h1conn_kick(pl);
}

static void on_conn_timer(uv_timer_t *t);

/* The earlier of two deadlines, 0 standing for none. */
static uint64_t earlier(uint64_t a, uint64_t b)
{
    return a && (!b || a < b) ? a : b;
}

/* The idle deadline: the last byte plus idle_ms, or the end of the look at the socket that
 * was asked when that passed (bm_h1conn_expired). */
static uint64_t idle_deadline(const h1x_t *x)
{
    uint64_t d = x->last_rx_ms + x->idle_ms;
    return x->idle_look_ms > d ? x->idle_look_ms : d;
}

uint64_t bm_h1conn_xfer_deadline(const h1x_t *x)
{
    uint64_t d = x->timeout_ms ? x->start_ms + x->timeout_ms : 0;
    if (x->idle_ms && !x->want_paused)
        d = earlier(d, idle_deadline(x));
    return d;
}

/* The earliest deadline of the connection, 0 when it has none. */
static uint64_t conn_deadline(const conn_t *k)
{
    uint64_t d = 0;
    if (k->state == CS_RESOLVING || k->state == CS_CONNECTING)
        d = k->connect_deadline;
    const h1x_t *x = k->x;
    if (x) {
        d = earlier(d, bm_h1conn_xfer_deadline(x));
    } else if (k->pooled) {
        d = earlier(d, k->idle_since + k->c->opts.idle_close_ms);
    }
    return d;
}

void bm_h1conn_timer_update(conn_t *k)
{
    uint64_t d = conn_deadline(k);
    if (!d || (k->due && k->due <= d))
        return; /* none, or the armed timer fires first and re-arms itself */
    uint64_t now = bm_h1client_now(k->c);
    uv_timer_start(&k->timer, on_conn_timer, d > now ? d - now : 0, 0);
    k->due = d;
}

/* Bytes of the node wait in the connection's socket, not read yet. */
static bool conn_has_input(const conn_t *k)
{
    uv_os_fd_t fd;
    return k && k->state == CS_OPEN && uv_fileno((const uv_handle_t *)&k->tcp, &fd) == 0 &&
           bm_uprules_socket_has_input(fd);
}

/*
 * What expired for a transfer at `now`, or NULL.
 *
 * Idle means the node was silent, and only a look at the socket after the deadline can tell.
 * libuv runs due timers before it polls for I/O, so after the process was not scheduled for
 * longer than idle_ms the idle deadline is found passed although bytes arrived meanwhile.
 * When the deadline passes, the timer is therefore re-armed 1 ms later: the loop polls the
 * socket in between (a timer due later than the loop's time never runs in the same pass),
 * and a read there moves last_rx_ms. Only if nothing was read and nothing waits in the
 * socket (the writer may be on this loop, e.g. a test's node) is the transfer idle.
 */
const char *bm_h1conn_expired(h1x_t *x, uint64_t now)
{
    if (x->timeout_ms && now >= x->start_ms + x->timeout_ms)
        return "no complete response within timeout_ms";
    if (!x->idle_ms)
        return NULL;
    if (x->want_paused) {
        x->last_rx_ms = now; /* the silence is ours, not the node's */
        return NULL;
    }
    uint64_t deadline = x->last_rx_ms + x->idle_ms;
    if (now < deadline || now < x->idle_look_ms)
        return NULL;
    if (x->idle_look_ms <= deadline) { /* no look since this silence began: look once */
        x->idle_look_ms = now + 1;
        return NULL;
    }
    if (conn_has_input(x->conn)) {
        x->last_rx_ms = now; /* its bytes wait for us: we were late, not the node */
        return NULL;
    }
    return "no data received within idle_timeout_ms";
}

static void on_conn_timer(uv_timer_t *t)
{
    conn_t *k = t->data;
    bm_h1client_t *c = k->c;
    k->due = 0;
    if (k->state == CS_CLOSED)
        return;
    bm_h1client_enter(c);
    uint64_t now = bm_h1client_now(c);
    h1x_t *x = k->x;
    const char *why;
    if ((k->state == CS_RESOLVING || k->state == CS_CONNECTING) && now >= k->connect_deadline) {
        if (x)
            bm_h1client_fail(x, BM_ETIMEDOUT, "connect timed out (connect_timeout_ms)");
        else
            bm_h1conn_close(k);
    } else if (x && (why = bm_h1conn_expired(x, now)) != NULL) {
        bm_h1client_fail(x, BM_ETIMEDOUT, why);
    } else if (!x && k->pooled && now >= k->idle_since + c->opts.idle_close_ms) {
        bm_h1conn_close(k);
    } else {
        bm_h1conn_timer_update(k);
    }
    bm_h1client_leave(c);
}

/* A connection that failed to connect: the next address within the deadline, or fail. */
static void connect_failed(conn_t *k, int uv_err, bool in_call)
{
    pool_t *pl = k->pool;
    h1x_t *x = k->x;
    if (x && k->addr_idx + 1 < pl->n_addrs && bm_h1client_now(k->c) < k->connect_deadline &&
        !k->c->dying) {
        k->x = NULL;
        x->conn = NULL;
        bm_h1conn_open(pl, x, k->addr_idx + 1, k->connect_deadline);
        bm_h1conn_close(k);
        return;
    }
    int err = uv_err == UV_ETIMEDOUT ? BM_ETIMEDOUT : BM_ECONNREFUSED;
    const char *detail = uv_err == UV_ECONNREFUSED   ? "connection refused"
                         : uv_err == UV_ETIMEDOUT    ? "connect timed out"
                         : uv_err == UV_ENETUNREACH  ? "network unreachable"
                         : uv_err == UV_EHOSTUNREACH ? "host unreachable"
                                                     : "could not connect";
    if (!x)
        bm_h1conn_close(k);
    else if (in_call)
        bm_h1client_fail_later(x, err, detail);
    else
        bm_h1client_fail(x, err, detail);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    (void)suggested;
    conn_t *k = h->data;
    b->base = k->c->rbuf;
    b->len = BM_H1_READ_BUF_SIZE;
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
    bm_h1client_enter(c);
    if (status < 0) {
        connect_failed(k, status, false);
    } else {
        uv_tcp_nodelay(&k->tcp, 1);
        uv_tcp_keepalive(&k->tcp, 1, TCP_KEEPALIVE_S);
        bm_h1conn_set_state(k, CS_OPEN);
        read_start(k);
        if (k->x)
            conn_send(k);
        else
            conn_release(k); /* its transfer was cancelled: a spare connection */
    }
    bm_h1client_leave(c);
}

static void conn_connect(conn_t *k)
{
    pool_t *pl = k->pool;
    bm_h1conn_set_state(k, CS_CONNECTING);
    k->connect_req.data = k;
    int rc = k->addr_idx < pl->n_addrs
                 ? uv_tcp_connect(&k->connect_req, &k->tcp,
                                  (const struct sockaddr *)&pl->addrs[k->addr_idx], on_connect)
                 : UV_ECONNREFUSED;
    if (rc)
        connect_failed(k, rc, true);
}

/* Opens a connection for x (to the pool's address addr_idx), bypassing the idle ones. */
void bm_h1conn_open(pool_t *pl, h1x_t *x, int addr_idx, uint64_t deadline)
{
    bm_h1client_t *c = pl->c;
    conn_t *k = calloc(1, sizeof *k);
    bm_h1resp_t *resp = k ? bm_h1resp_new(BM_UPRULES_MAX_HEAD_BYTES) : NULL;
    if (!resp) {
        free(k);
        bm_h1client_fail_later(x, BM_ENOMEM, "out of memory for a connection");
        return;
    }
    k->resp = resp;
    k->c = c;
    k->pool = pl;
    uv_tcp_init(c->loop, &k->tcp);
    uv_timer_init(c->loop, &k->timer);
    k->tcp.data = k;
    k->timer.data = k;
    bm_link_init(&k->pool_link);
    bm_link_init(&k->rw_link);
    bm_link_init(&k->resume_link);
    bm_list_push_front(&c->conns, &k->all_link);
    pl->n_conns++;
    k->addr_idx = addr_idx;
    k->connect_deadline =
        deadline ? deadline : bm_h1client_deadline_base(uv_hrtime()) + x->connect_ms;
    attach(x, k);
    if (addrs_fresh(pl)) {
        conn_connect(k);
    } else {
        bm_h1conn_set_state(k, CS_RESOLVING);
        bm_list_push_front(&pl->resolve_waiters, &k->rw_link);
        pool_resolve(pl);
    }
    if (k->state != CS_CLOSED)
        bm_h1conn_timer_update(k);
}

/* An open connection without a transfer: to the first waiting transfer, or the pool. */
static void conn_release(conn_t *k)
{
    bm_h1client_t *c = k->c;
    pool_t *pl = k->pool;
    if (c->dying || k->nreq >= c->opts.max_requests) {
        bm_h1conn_close(k);
        return;
    }
    read_start(k);
    if (!bm_list_empty(&pl->wait)) {
        h1x_t *x = bm_list_first(&pl->wait, h1x_t, queue);
        bm_link_unlink(&x->queue);
        attach(x, k);
        conn_send(k);
        return;
    }
    k->pooled = true;
    k->idle_since = bm_h1client_now(c);
    bm_list_push_front(&pl->idle, &k->pool_link);
    bm_h1conn_timer_update(k);
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
    bm_h1client_enter(c);
    if (status < 0) {
        /* Nothing to decide here: a failed write means the node closed or reset the
         * connection, which the read side reports next, after any answer the node sent
         * before it stopped reading (a 413 for a body it did not want). */
        k->write_failed = true;
        if (!k->x)
            bm_h1conn_close(k);
    } else if (k->release_after_write) {
        k->release_after_write = false;
        conn_release(k);
    }
    bm_h1client_leave(c);
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
        bm_h1conn_timer_update(k);
        return;
    }
    size_t left = (size_t)sent;
    unsigned first = 0;
    while (first < nb && left >= b[first].len)
        left -= b[first++].len;
    if (first == nb) {
        bm_h1conn_timer_update(k);
        return; /* all of it went out */
    }
    b[first].base += left;
    b[first].len -= left;
    k->write_req.data = k;
    if (uv_write(&k->write_req, (uv_stream_t *)&k->tcp, b + first, nb - first, on_write) != 0) {
        /* libuv refuses only a handle it cannot write to: treat it as a reset */
        bm_h1conn_close(k);
        bm_h1client_fail_later(x, BM_ECONNRESET, "could not send the request");
        return;
    }
    k->writing = true;
    k->wbody = bm_buf_ref(x->req_body);
    bm_h1conn_timer_update(k);
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
        bm_h1conn_close(k);
    else if (k->writing)
        k->release_after_write = true;
    else
        conn_release(k);
    x->err = 0;
    bm_h1client_finish(x);
}

/* The final head arrived. False when the transfer ended (failed, or cancelled in on_head). */
static bool deliver_head(conn_t *k, h1x_t *x)
{
    int64_t blen = bm_h1resp_body_length(k->resp);
    if (!x->stream && blen > 0 && (uint64_t)blen > x->max_bytes) {
        bm_h1client_fail(x, BM_ETOOBIG, "response body larger than max_response_bytes");
        return false;
    }
    x->status = bm_h1resp_status(k->resp);
    x->head_done = true;
    x->t_head_us = bm_clock_mono_us();
    if (!x->stream && blen > 0 && bm_status_2xx(x->status) && !x->body.b)
        x->body.b = bm_buf_new((size_t)blen); /* one allocation for the whole body */
    if (!x->cbs.on_head)
        return true;
    x->in_cb = true;
    x->cbs.on_head(&x->base, x->status, &x->hdrs, x->ud);
    return bm_h1client_after_cb(x);
}

/* A piece of body. False when the transfer ended. */
static bool deliver_data(h1x_t *x, const char *p, size_t n)
{
    if (!x->stream) {
        if (n > x->max_bytes - bm_str_len(&x->body)) {
            bm_h1client_fail(x, BM_ETOOBIG, "response body larger than max_response_bytes");
            return false;
        }
        bm_str_append(&x->body, p, n);
        if (x->body.oom) {
            bm_h1client_fail(x, BM_ENOMEM, "out of memory for the response body");
            return false;
        }
        return true;
    }
    x->in_cb = true;
    int rc = x->cbs.on_data(&x->base, p, n, x->ud);
    if (!bm_h1client_after_cb(x))
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
            bm_h1client_fail(k->x, BM_ENOMEM, "out of memory while paused");
            return;
        }
        free(k->held);
        k->held = h;
        k->held_cap = n;
    }
    if (n > 0) /* a pause at the end of a read holds nothing (and k->held may be NULL) */
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
            bm_h1client_fail(x, err, detail);
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
        bm_h1conn_open(k->pool, x, 0, 0);
        bm_h1conn_close(k);
        return;
    }
    bm_h1client_fail(x, BM_ECONNRESET, detail);
}

/* The connection's read side ended (EOF or an error). */
static void conn_read_end(conn_t *k, int uv_err)
{
    h1x_t *x = k->x;
    if (!x) {
        bm_h1conn_close(k); /* an idle connection the node closed */
        return;
    }
    if (!k->got_bytes) {
        retry_or_fail(k, x,
                      uv_err == UV_EOF ? "connection closed before any response"
                                       : "connection reset before any response");
        return;
    }
    if (uv_err != UV_EOF) {
        bm_h1client_fail(x, BM_ECONNRESET, "connection reset inside the response");
        return;
    }
    if (bm_h1resp_eof(k->resp) == BM_H1RESP_DONE) {
        complete(k, x, false); /* a body delimited by the close */
        return;
    }
    const char *detail;
    int err = bm_h1resp_error(k->resp, &detail);
    bm_h1client_fail(x, err, detail);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *b)
{
    conn_t *k = s->data;
    bm_h1client_t *c = k->c;
    if (nread == 0 || k->state != CS_OPEN)
        return;
    bm_h1client_enter(c);
    h1x_t *x = k->x;
    if (nread < 0) {
        conn_read_end(k, (int)nread);
    } else if (!x) {
        bm_h1conn_close(k); /* bytes nobody asked for: the connection cannot be trusted */
    } else {
        k->got_bytes = true;
        x->last_rx_ms = bm_h1client_now(c);
        process(k, x, b->base, (size_t)nread);
    }
    bm_h1client_leave(c);
}

/* Hands the held bytes to a resumed transfer and reads again. From the loop. */
void bm_h1conn_resume(conn_t *k)
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

bool bm_h1conn_acquire(h1x_t *x)
{
    pool_t *pl = x->node->pool;
    if (!bm_list_empty(&pl->idle)) {
        conn_t *k = bm_list_first(&pl->idle, conn_t, pool_link);
        pool_remove(k);
        attach(x, k);
        conn_send(k);
        return true;
    }
    if (pl->n_conns < pl->max_conns) {
        bm_h1conn_open(pl, x, 0, 0);
        return true;
    }
    return false;
}

void bm_h1conn_forget_all(bm_h1client_t *c)
{
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
}
