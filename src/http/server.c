/* SPDX-License-Identifier: MIT */
/*
 * server: connections, requests and the response writer.
 *
 * Each connection owns one http1 parser, one input buffer (borrowed from a server-wide
 * pool while bytes are buffered, so idle keep-alive connections hold none), one timer and
 * an output queue. Requests are handled one at a time: the parser stops after each
 * message, the request (embedded in the connection, so a request costs no allocation)
 * goes to the handler, and parsing resumes when the handler ends it. Meanwhile the
 * socket is still read, into the bounded input buffer, so that a client that goes away is
 * noticed at once; reading stops when the buffer is full.
 *
 * Output is a queue of segments that reference bm_buf_t buffers. Small pieces (response
 * heads, chunk framing, small bodies) are copied into an accumulator buffer of the
 * connection that is reused once its bytes are written; larger bodies are referenced,
 * never copied. Writes are not issued per call: the queue is flushed when the request
 * processing of a read ends, or, for responses written from other callbacks, in a check
 * handle at the end of the loop iteration, so a head and its body (or several pipelined
 * responses) leave in one writev. uv_try_write goes first; what the kernel does not take
 * goes to one uv_write at a time.
 *
 * Timeouts use one lazy timer per connection: a deadline is recorded and the timer only
 * restarted when the deadline moves earlier. While a handler owns a request there is no
 * deadline at all (a stream may last for days); after it ended, the idle timeout also
 * bounds how long queued output may make no progress.
 *
 * TLS (server_tls.c) sits between the socket and everything above: on a TLS listener the
 * bytes read go through the connection's TLS session into the same input buffer, and
 * bm_srv_conn_flush hands the output queue to it instead of writing it in plain.
 *
 * A connection is freed when its handles are closed and no handler holds its request:
 * a reference count covers both, and temporary holds protect code that calls out.
 *
 * This file holds the connections, the output queue, reading, timers and the listener;
 * server_resp.c the request and response API handlers call, and the response heads; what
 * both share is in server_int.h.
 */
#include "http/server.h"

#include <errno.h>
#include <linux/sockios.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>
#include <time.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/defaults.h"
#include "base/err.h"
#include "base/log.h"
#include "http/http1.h"
#include "http/server_int.h"
#include "http/uprules.h"

static void conn_process(conn_t *c);

/* Moves the connection forward to `to` (never back); logs the step in debug builds. */
void bm_srv_conn_set_state(conn_t *c, conn_state_t to)
{
    if (to <= c->st)
        return;
#ifdef BM_DEBUG
    static const char *const names[] = {"open", "close-after", "finishing",
                                        "shut", "linger",      "closed"};
    if (bm_log_enabled(BM_LOG_DEBUG))
        bm_log(BM_LOG_DEBUG, "server conn %p: %s -> %s", (void *)c, names[c->st], names[to]);
#endif
    c->st = to;
}
static void conn_update_deadline(conn_t *c, bool progress);
static void conn_update_reading(conn_t *c);
static void srv_maybe_done(bm_server_t *srv);
static void dirty_remove(conn_t *c);

/* ---- small helpers ------------------------------------------------------------------- */

void bm_server_opts_default(bm_server_opts_t *o)
{
    o->max_target_bytes = BM_DEFAULT_SERVER_MAX_TARGET_BYTES;
    o->max_header_bytes = BM_DEFAULT_SERVER_MAX_HEADER_BYTES;
    o->max_body_bytes = BM_DEFAULT_SERVER_MAX_BODY_BYTES;
    o->header_timeout_ms = BM_DEFAULT_SERVER_HEADER_TIMEOUT_MS;
    o->body_timeout_ms = BM_DEFAULT_SERVER_BODY_TIMEOUT_MS;
    o->idle_timeout_ms = BM_DEFAULT_SERVER_IDLE_TIMEOUT_MS;
    o->max_connections = BM_DEFAULT_SERVER_MAX_CONNECTIONS;
    o->max_connections_per_client = BM_DEFAULT_SERVER_MAX_CONNECTIONS_PER_CLIENT;
    o->body_deadline_ms = BM_DEFAULT_SERVER_BODY_DEADLINE_MS;
    o->send_timeout_ms = BM_DEFAULT_SERVER_SEND_TIMEOUT_MS;
    o->write_high_water = 1024 * 1024;
    o->reuse_port = false;
}

/* ---- input buffer pool ------------------------------------------------------------- */

static char *pool_get(bm_server_t *srv)
{
    if (srv->npool)
        return srv->pool[--srv->npool];
    return malloc(IN_BUF_SIZE);
}

static void pool_put(bm_server_t *srv, char *b)
{
    if (!b)
        return;
    if (srv->npool < POOL_MAX && !srv->freeing)
        srv->pool[srv->npool++] = b;
    else
        free(b);
}

/* Gives the input buffer back when it holds nothing unparsed. */
void bm_srv_conn_release_input(conn_t *c)
{
    if (c->in && c->in_off == c->in_len) {
        pool_put(c->srv, c->in);
        c->in = NULL;
        c->in_off = c->in_len = 0;
    }
}

/* ---- connection lifetime ------------------------------------------------------------- */

static void conn_free(conn_t *c)
{
    bm_server_t *srv = c->srv;
    dirty_remove(c);
    for (size_t i = c->qhead; i < c->qtail; i++)
        bm_buf_unref(c->q[i].b);
    free(c->q);
    bm_buf_unref(c->acc);
    bm_buf_unref(c->req.body);
    free(c->req.target);
    if (c->req.extra) {
        bm_hdrs_dispose(c->req.extra);
        free(c->req.extra);
    }
    if (c->in) {
        pool_put(srv, c->in);
        c->in = NULL;
    }
    bm_http1_free(c->parser);
    bm_tls_conn_free(c->tls);
    bm_buf_unref(c->tls_wbuf);
    free(c);
    srv->nalloc--;
    srv_maybe_done(srv);
}

void bm_srv_conn_hold(conn_t *c)
{
    c->refs++;
}

void bm_srv_conn_unref(conn_t *c)
{
    bm_assert(c->refs > 0);
    if (--c->refs == 0)
        conn_free(c);
}

static void on_conn_handle_closed(uv_handle_t *h)
{
    conn_t *c = h->data;
    if (--c->handles_open == 0)
        bm_srv_conn_unref(c);
}

/* The idle handle only keeps the loop from blocking until the check handle flushed. */
static void on_idle(uv_idle_t *h)
{
    (void)h;
}

static void dirty_remove(conn_t *c)
{
    bm_link_unlink(&c->dirty_link);
}

/* A queue, not a stack: the answers completed in one loop iteration leave in the order they
 * completed, so a busy iteration does not write its oldest answer last (a stack cost the
 * proxy benchmark 0.2 ms of p99 at 64 connections). */
void bm_srv_dirty_add(conn_t *c)
{
    if (bm_link_linked(&c->dirty_link))
        return;
    bm_server_t *srv = c->srv;
    bm_list_push_back(&srv->dirty, &c->dirty_link);
    uv_idle_start(&srv->idle, on_idle); /* no effect when already active */
}

/* ---- output queue -------------------------------------------------------------------- */

static bool q_push(conn_t *c, bm_buf_t *b, size_t off, size_t len)
{
    if (c->qtail == c->qcap) {
        if (c->qhead > 0) {
            memmove(c->q, c->q + c->qhead, (c->qtail - c->qhead) * sizeof *c->q);
            c->qtail -= c->qhead;
            c->qhead = 0;
        } else {
            seg_t *nq = bm_grow(c->q, c->qtail, &c->qcap, sizeof *nq, 8);
            if (!nq)
                return false;
            c->q = nq;
        }
    }
    c->q[c->qtail++] = (seg_t){bm_buf_ref(b), off, len};
    return true;
}

/*
 * True while the connection streams a response of open length (chunked, or until the
 * close): an event stream that may last days. Such a connection keeps only a small
 * accumulator, for chunk framing, and references body buffers instead of copying them:
 * thousands of subscribers then cost little memory between events, and each event is
 * still written without a copy (the events module serialises it once for all of them).
 */
static bool conn_streaming(const conn_t *c)
{
    const bm_req_t *r = &c->req;
    return r->owned && r->started && (r->mode == RESP_CHUNKED || r->mode == RESP_UNTIL_CLOSE);
}

/* Turns the accumulator bytes not yet in the queue into a segment. */
static bool acc_seal(conn_t *c)
{
    if (!c->acc || c->acc->len == c->acc_start)
        return true;
    if (!q_push(c, c->acc, c->acc_start, c->acc->len - c->acc_start))
        return false;
    c->acc_start = c->acc->len;
    return true;
}

/*
 * Room for n contiguous bytes at the end of the accumulator. The accumulator is never
 * reallocated (queued segments point into it); when full, a new one is started, and an
 * old one whose bytes were all written is reused from its beginning.
 */
char *bm_srv_acc_reserve(conn_t *c, size_t n)
{
    bm_buf_t *a = c->acc;
    if (a && a->refs == 1 && c->acc_start == a->len)
        a->len = c->acc_start = 0;
    if (a && a->cap - a->len >= n)
        return a->data + a->len;
    if (!acc_seal(c))
        return NULL;
    size_t cap = conn_streaming(c) ? STREAM_ACC_CAP : ACC_CAP;
    bm_buf_t *na = bm_buf_new(n > cap ? n : cap);
    if (!na)
        return NULL;
    bm_buf_unref(c->acc);
    c->acc = na;
    c->acc_start = 0;
    return na->data;
}

void bm_srv_acc_commit(conn_t *c, size_t n)
{
    c->acc->len += n;
    c->pending += n;
}

bool bm_srv_queue_copy(conn_t *c, const void *p, size_t n)
{
    if (n == 0)
        return true;
    char *w = bm_srv_acc_reserve(c, n);
    if (!w)
        return false;
    memcpy(w, p, n);
    bm_srv_acc_commit(c, n);
    return true;
}

/* Queues b[off..off+n): copied when small, else referenced. */
bool bm_srv_queue_buf(conn_t *c, bm_buf_t *b, size_t off, size_t n)
{
    if (n == 0)
        return true;
    if (n <= SMALL_COPY && !conn_streaming(c))
        return bm_srv_queue_copy(c, b->data + off, n);
    if (!acc_seal(c) || !q_push(c, b, off, n))
        return false;
    c->pending += n;
    return true;
}

/* Drops n written bytes from the front of the queue. */
void bm_srv_q_consume(conn_t *c, size_t n)
{
    while (n > 0 && c->qhead < c->qtail) {
        seg_t *s = &c->q[c->qhead];
        size_t k = n < s->len ? n : s->len;
        s->off += k;
        s->len -= k;
        n -= k;
        c->pending -= k;
        if (s->len == 0) {
            bm_buf_unref(s->b);
            c->qhead++;
        }
    }
    if (c->qhead == c->qtail)
        c->qhead = c->qtail = 0;
}

static size_t q_iov(conn_t *c, uv_buf_t *iov, size_t *bytes)
{
    size_t n = 0, total = 0;
    for (size_t i = c->qhead; i < c->qtail && n < MAX_IOV && total < MAX_WRITE_BYTES; i++) {
        size_t len = c->q[i].len;
        if (len > MAX_WRITE_BYTES - total)
            len = MAX_WRITE_BYTES - total;
        iov[n++] = uv_buf_init(c->q[i].b->data + c->q[i].off, (unsigned)len);
        total += len;
    }
    *bytes = total;
    return n;
}

/*
 * Runs conn_process from the check handle, at the end of this loop iteration: a handler is
 * then never called from inside another call into the server (bm_resp_end of the previous
 * request, bm_server_shutdown).
 */
void bm_srv_conn_schedule(conn_t *c)
{
    if (c->st == CONN_CLOSED)
        return;
    c->need_process = true;
    bm_srv_dirty_add(c);
}

/* Marks the connection for a flush at the end of this loop iteration. */
void bm_srv_conn_mark_dirty(conn_t *c)
{
    if (c->in_process || c->st == CONN_CLOSED)
        return; /* conn_process flushes when it returns */
    bm_srv_dirty_add(c);
}

void bm_srv_arm_drain(conn_t *c)
{
    if (c->pending > c->srv->opts.write_high_water)
        c->drain_armed = true;
}

/* Runs the drain callback when the queue fell to the low-water mark. */
static void maybe_drain(conn_t *c)
{
    if (!c->drain_armed || c->pending > c->srv->opts.write_high_water / 2)
        return;
    c->drain_armed = false;
    bm_req_t *r = &c->req;
    if (r->owned && r->drain_cb && c->st != CONN_CLOSED)
        r->drain_cb(r, r->drain_ud);
}

static void on_shutdown(uv_shutdown_t *sr, int status)
{
    conn_t *c = sr->data;
    if (c->st != CONN_CLOSED) {
        if (status < 0) {
            bm_srv_conn_close(c);
        } else {
            /* Our FIN is out; read until the client's, so that unread input cannot turn our
             * close into a reset that destroys the answer on its way. */
            bm_srv_conn_set_state(c, CONN_LINGER);
            c->deadline = 0;
            c->dl_kind = DL_NONE;
            conn_update_deadline(c, false);
            conn_update_reading(c);
        }
    }
    bm_srv_conn_unref(c);
}

/* close_after: once the queue is empty, shut the write side down, then linger. */
static void conn_maybe_shutdown(conn_t *c)
{
    if (c->st != CONN_FINISHING || c->pending > 0 || c->writing)
        return;
    if (c->peer_eof) {
        bm_srv_conn_close(c); /* the client's FIN came first: nothing left to linger for */
        return;
    }
    if (c->tls && bm_srv_tls_close_notify(c))
        return; /* back here once the close_notify is written */
    bm_srv_conn_set_state(c, CONN_SHUT);
    c->sreq.data = c;
    int rc = uv_shutdown(&c->sreq, (uv_stream_t *)&c->tcp, on_shutdown);
    if (rc < 0) {
        bm_srv_conn_close(c);
        return;
    }
    bm_srv_conn_hold(c);
}

void bm_srv_on_write(uv_write_t *w, int status)
{
    conn_t *c = w->data;
    c->writing = false;
    bm_srv_q_consume(c, c->wbytes);
    c->wbytes = 0;
    bm_buf_unref(c->tls_wbuf);
    c->tls_wbuf = NULL;
    if (c->st == CONN_CLOSED)
        return;
    if (status < 0) {
        bm_srv_conn_close(c);
        return;
    }
    bm_srv_conn_hold(c);
    bm_srv_conn_flush(c);
    if (c->st != CONN_CLOSED) {
        conn_update_deadline(c, true);
        /* Pipelined requests wait while the queue is above high water. */
        if (!c->req.owned && c->st < CONN_FINISHING)
            conn_process(c);
    }
    bm_srv_conn_unref(c);
}

/*
 * Writes the queue in plain: uv_try_write first, then one uv_write for the rest. False
 * when the connection closed.
 */
static bool plain_send(conn_t *c)
{
    uv_buf_t iov[MAX_IOV];
    size_t bytes;
    while (c->qhead < c->qtail) {
        size_t n = q_iov(c, iov, &bytes);
        int rc = uv_try_write((uv_stream_t *)&c->tcp, iov, (unsigned)n);
        if (rc == UV_EAGAIN || rc == UV_ENOSYS)
            rc = 0;
        if (rc < 0) {
            bm_srv_conn_close(c);
            return false;
        }
        bm_srv_q_consume(c, (size_t)rc);
        if ((size_t)rc < bytes)
            break; /* the kernel is full: hand the rest to libuv */
    }
    if (c->qhead < c->qtail) {
        size_t n = q_iov(c, iov, &bytes);
        c->wreq.data = c;
        int rc = uv_write(&c->wreq, (uv_stream_t *)&c->tcp, iov, (unsigned)n, bm_srv_on_write);
        if (rc < 0) {
            bm_srv_conn_close(c);
            return false;
        }
        c->writing = true;
        c->wbytes = bytes;
    }
    return true;
}

/* Writes what is queued, in plain or through the TLS session (server_tls.c). */
void bm_srv_conn_flush(conn_t *c)
{
    if (c->st == CONN_CLOSED || c->writing)
        return;
    dirty_remove(c);
    if (!acc_seal(c)) {
        bm_srv_conn_close(c);
        return;
    }
    if (!(c->tls ? bm_srv_tls_send(c) : plain_send(c)))
        return;
    if (!c->writing && c->qhead == c->qtail && c->acc && c->acc->refs == 1 &&
        c->acc->cap > STREAM_ACC_CAP && conn_streaming(c)) {
        /* A stream is under way and everything went out, its head too: keep no large
         * accumulator while waiting for the next event (a small one comes with it). */
        bm_buf_unref(c->acc);
        c->acc = NULL;
        c->acc_start = 0;
    }
    maybe_drain(c);
    if (c->st != CONN_CLOSED)
        conn_maybe_shutdown(c);
    if (c->st != CONN_CLOSED && c->req.owned && !c->in_process)
        conn_update_deadline(c, false); /* output queued by a handler: the send timeout */
}

/* ---- closing and timers -------------------------------------------------------------- */

/* Fires the abort callback of an owned request whose client is gone (at most once). */
static void conn_fire_abort(conn_t *c)
{
    bm_req_t *r = &c->req;
    if (!r->owned || r->aborted || !r->abort_cb)
        return;
    r->aborted = true;
    r->abort_cb(r, r->abort_ud);
}

/* Closes the connection now. An owned request learns it through its abort callback. */
void bm_srv_conn_close(conn_t *c)
{
    if (c->st == CONN_CLOSED)
        return;
    bm_server_t *srv = c->srv;
    bm_srv_conn_set_state(c, CONN_CLOSED);
    bm_srv_conn_hold(c);
    dirty_remove(c);
    bm_link_unlink(&c->link);
    srv->nconns--;
    if (c->counted) {
        bm_peers_release(srv->peers, c->peer);
        c->counted = false;
    }
    c->deadline = 0;
    uv_close((uv_handle_t *)&c->tcp, on_conn_handle_closed);
    uv_close((uv_handle_t *)&c->timer, on_conn_handle_closed);
    if (c->in) {
        pool_put(srv, c->in);
        c->in = NULL;
        c->in_off = c->in_len = 0;
    }
    conn_fire_abort(c);
    bm_srv_conn_unref(c);
}

static void on_conn_timer(uv_timer_t *t);

static void set_deadline(conn_t *c, deadline_kind_t kind, uint64_t ms)
{
    uint64_t now = uv_now(c->srv->loop);
    /* A deadline that is due at once (a body past its total deadline) keeps the look
     * already taken, so that the look cannot stretch it again and again. */
    if (kind != c->dl_kind || ms > 0)
        c->dl_looked = false;
    c->dl_kind = kind;
    c->deadline = now + ms;
    if (!uv_is_active((uv_handle_t *)&c->timer) || uv_timer_get_due_in(&c->timer) > ms)
        uv_timer_start(&c->timer, on_conn_timer, ms, 0);
}

static void clear_deadline(conn_t *c)
{
    c->dl_kind = DL_NONE;
    c->deadline = 0; /* the timer may still fire; it then does nothing */
}

/*
 * Chooses the deadline for the connection's state. `progress`: output was written, which
 * pushes a send deadline further.
 */
static void conn_update_deadline(conn_t *c, bool progress)
{
    if (c->st == CONN_CLOSED)
        return;
    const bm_server_opts_t *o = &c->srv->opts;
    bm_http1_phase_t ph = bm_http1_phase(c->parser);
    /* A write in flight counts: under TLS its bytes left the queue when they were encrypted. */
    bool unsent = c->pending > 0 || c->writing;
    if (c->req.owned) {
        /* No bound on how long a handler holds a request (a stream may last days), but the
         * client must keep taking what it was sent. */
        if (!unsent)
            clear_deadline(c);
        else if (c->dl_kind != DL_SEND || progress)
            set_deadline(c, DL_SEND, o->send_timeout_ms);
    } else if (c->st == CONN_LINGER) {
        if (c->dl_kind != DL_LINGER)
            set_deadline(c, DL_LINGER, LINGER_MS);
    } else if (unsent && (c->st >= CONN_FINISHING || ph == BM_HTTP1_IDLE)) {
        if (c->dl_kind != DL_SEND || progress)
            set_deadline(c, DL_SEND, o->send_timeout_ms);
    } else if (ph == BM_HTTP1_HEAD) {
        if (c->dl_kind != DL_HEAD)
            set_deadline(c, DL_HEAD, o->header_timeout_ms);
    } else if (ph == BM_HTTP1_BODY) {
        /* the gap between pieces, and the whole body by its deadline */
        if (c->dl_kind != DL_BODY || !progress) {
            uint64_t now = uv_now(c->srv->loop);
            uint64_t left = c->body_end > now ? c->body_end - now : 0;
            set_deadline(c, DL_BODY, left < o->body_timeout_ms ? left : o->body_timeout_ms);
        }
    } else if (ph == BM_HTTP1_IDLE && c->st < CONN_FINISHING) {
        if (c->fresh) {
            if (c->dl_kind != DL_FRESH)
                set_deadline(c, DL_FRESH, o->header_timeout_ms);
        } else if (c->dl_kind != DL_IDLE) {
            set_deadline(c, DL_IDLE, o->idle_timeout_ms);
        }
    }
}

/* Bytes of the client wait in the connection's socket, not read yet. */
static bool conn_has_input(const conn_t *c)
{
    uv_os_fd_t fd;
    return uv_fileno((const uv_handle_t *)&c->tcp, &fd) == 0 && bm_uprules_socket_has_input(fd);
}

/*
 * True when the deadline that passed must wait for one more look at the socket: it judges
 * the client's input (a head, a body, a first or next request), reading is on, and bytes
 * wait unread. libuv runs due timers before it polls for I/O, so after the process was not
 * scheduled for longer than the timeout, the deadline is found passed although the client's
 * bytes arrived meanwhile: the client was in time, we were late. The timer is then re-armed
 * 1 ms later; the loop polls the socket in between (a timer due after the loop's time never
 * runs in the same pass) and what it reads moves the request on (completes it, or sets the
 * next deadline). Only one look per deadline, so a client cannot stretch it by dripping.
 */
static bool deadline_needs_look(conn_t *c)
{
    deadline_kind_t k = c->dl_kind;
    if (c->dl_looked || !c->reading ||
        (k != DL_FRESH && k != DL_IDLE && k != DL_HEAD && k != DL_BODY))
        return false;
    c->dl_looked = conn_has_input(c);
    return c->dl_looked;
}

static void on_conn_timer(uv_timer_t *t)
{
    conn_t *c = t->data;
    if (c->st == CONN_CLOSED || c->deadline == 0)
        return;
    uint64_t now = uv_now(c->srv->loop);
    if (now < c->deadline) {
        uv_timer_start(&c->timer, on_conn_timer, c->deadline - now, 0);
        return;
    }
    if (deadline_needs_look(c)) {
        uv_timer_start(&c->timer, on_conn_timer, 1, 0);
        return;
    }
    deadline_kind_t kind = c->dl_kind;
    clear_deadline(c);
    switch (kind) {
    case DL_HEAD:
    case DL_BODY:
        /* Nothing of an answer to this request was sent: say why we close. */
        bm_srv_conn_hold(c);
        bm_srv_conn_send_error(c, 408,
                               kind == DL_HEAD      ? "request head not received in time"
                               : now >= c->body_end ? "request body not complete in time"
                                                    : "request body not received in time");
        conn_process(c);
        bm_srv_conn_unref(c);
        break;
    case DL_SEND:
        bm_log_limited(&c->srv->log_lim, BM_LOG_INFO,
                       "server: closing %s: response not read for %u ms (server.sendTimeout)",
                       c->peer, c->srv->opts.send_timeout_ms);
        bm_srv_conn_close(c);
        break;
    default:
        if (kind == DL_FRESH && c->tls && !bm_tls_conn_ready(c->tls))
            bm_log_limited(&c->srv->tls_log_lim, BM_LOG_WARN,
                           "server: TLS handshake with %s not done within %u ms", c->peer,
                           c->srv->opts.header_timeout_ms);
        bm_srv_conn_close(c);
        break;
    }
}

/* ---- reading --------------------------------------------------------------------- */

static bool conn_body_direct(conn_t *c)
{
    if (c->in_off != c->in_len || bm_http1_phase(c->parser) != BM_HTTP1_BODY)
        return false;
    const bm_http1_head_t *h = bm_http1_head(c->parser);
    return h && h->content_length > 0 && c->req.body;
}

/* Grows the request body so that `extra` more bytes fit, up to `limit` in total. */
static bool body_reserve(conn_t *c, size_t extra, size_t limit)
{
    bm_buf_t *b = c->req.body;
    size_t len = b ? b->len : 0;
    size_t cap = b ? b->cap : 0;
    if (cap - len >= extra)
        return true;
    size_t ncap = cap ? cap * 2 : 16 * 1024;
    if (ncap < len + extra)
        ncap = len + extra;
    if (ncap > limit && limit >= len + extra)
        ncap = limit;
    bm_buf_t *nb = realloc(b, sizeof *nb + ncap + 1);
    if (!nb)
        return false;
    if (!b) {
        nb->refs = 1;
        nb->len = 0;
    }
    nb->cap = ncap;
    c->req.body = nb;
    return true;
}

/* True while the input buffer can take more bytes (what a read may fill). */
bool bm_srv_input_room(const conn_t *c)
{
    return !c->in || c->in_off > 0 || c->in_len < IN_BUF_SIZE;
}

/* Where the next input bytes go: straight into the request body, or the input buffer. */
void bm_srv_input_alloc(conn_t *c, uv_buf_t *buf)
{
    if (conn_body_direct(c)) {
        /* Read the body straight into the request's buffer: no copy for large uploads. */
        const bm_http1_head_t *hd = bm_http1_head(c->parser);
        uint64_t want = (uint64_t)hd->content_length - c->req.body->len;
        if (c->req.body->cap == c->req.body->len)
            body_reserve(c, 1, (size_t)hd->content_length);
        bm_buf_t *b = c->req.body;
        size_t room = b->cap - b->len;
        if (room > 0) {
            if (room > want)
                room = (size_t)want;
            c->alloc_direct = true;
            *buf = uv_buf_init(b->data + b->len, (unsigned)(room > UINT32_MAX ? UINT32_MAX : room));
            return;
        }
    }
    if (!c->in) {
        c->in = pool_get(c->srv);
        c->in_off = c->in_len = 0;
        if (!c->in) {
            *buf = uv_buf_init(NULL, 0);
            return;
        }
    }
    if (c->in_off == c->in_len) {
        c->in_off = c->in_len = 0;
    } else if (c->in_off > 0 && IN_BUF_SIZE - c->in_len < IN_BUF_SIZE / 4) {
        memmove(c->in, c->in + c->in_off, c->in_len - c->in_off);
        c->in_len -= c->in_off;
        c->in_off = 0;
    }
    *buf = uv_buf_init(c->in + c->in_len, (unsigned)(IN_BUF_SIZE - c->in_len));
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    conn_t *c = h->data;
    (void)suggested;
    c->alloc_direct = false;
    if (c->st == CONN_LINGER)
        *buf = uv_buf_init(c->srv->discard, sizeof c->srv->discard);
    else if (c->tls) /* libuv calls on_read before it allocates again: one buffer serves all */
        *buf = uv_buf_init(c->srv->tls_rbuf, sizeof c->srv->tls_rbuf);
    else
        bm_srv_input_alloc(c, buf);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

/* Reads while there is room; stops when the buffer is full of unparsed input. */
static void conn_update_reading(conn_t *c)
{
    if (c->st == CONN_CLOSED)
        return;
    bool want;
    if (c->st == CONN_LINGER)
        want = true;
    else if (c->peer_eof || c->st >= CONN_FINISHING)
        want = false;
    else
        want = bm_srv_input_room(c);
    if (want && !c->reading) {
        if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0)
            c->reading = true;
    } else if (!want && c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
    }
}

/* Takes nread bytes (or the end, or an error) that arrived in `buf` (bm_srv_input_alloc's). */
void bm_srv_conn_input(conn_t *c, ssize_t nread, const uv_buf_t *buf, bool direct)
{
    if (nread == 0) {
        bm_srv_conn_release_input(c);
        return;
    }
    if (c->st == CONN_LINGER) {
        if (nread < 0)
            bm_srv_conn_close(c);
        return;
    }
    if (nread < 0) {
        bm_srv_conn_release_input(c);
        if (nread != UV_EOF || c->req.owned) {
            /* A reset, or a client that left while its request was being handled. */
            bm_srv_conn_close(c);
            return;
        }
        /* A half close: answer what is buffered, then close. */
        c->peer_eof = true;
        bm_srv_conn_hold(c);
        conn_update_reading(c);
        conn_process(c);
        bm_srv_conn_unref(c);
        return;
    }
    bm_srv_conn_hold(c);
    if (direct) {
        size_t used;
        bm_http1_feed(c->parser, buf->base, (size_t)nread, &used);
        /* A body of known length: http-parser takes every byte; the outcome (DONE or
         * ERROR) is left in the parser's phase for conn_process. */
    } else {
        c->in_len += (size_t)nread;
    }
    conn_process(c);
    bm_srv_conn_unref(c);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    conn_t *c = s->data;
    bool direct = c->alloc_direct;
    c->alloc_direct = false;
    if (c->st == CONN_CLOSED)
        return;
    if (c->tls && nread > 0 && c->st != CONN_LINGER)
        bm_srv_tls_received(c, buf->base, (size_t)nread);
    else
        bm_srv_conn_input(c, nread, buf, direct);
}

/* ---- the parser's events --------------------------------------------------------- */

static int on_head(void *ud, const bm_http1_head_t *h)
{
    conn_t *c = ud;
    bm_req_t *r = &c->req;
    r->start_us = bm_clock_mono_us();
    c->body_end = uv_now(c->srv->loop) + c->srv->opts.body_deadline_ms;
    if (h->content_length > 0) {
        size_t first =
            h->content_length > BODY_PREALLOC ? BODY_PREALLOC : (size_t)h->content_length;
        if (!body_reserve(c, first, (size_t)h->content_length))
            return 503;
    }
    if (h->expect_continue) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        if (!bm_srv_queue_copy(c, cont, sizeof cont - 1))
            return 503;
    }
    return 0;
}

static int on_body(void *ud, const char *p, size_t n)
{
    conn_t *c = ud;
    bm_buf_t *b = c->req.body;
    if (b && p == b->data + b->len) { /* read in place */
        b->len += n;
        return 0;
    }
    const bm_http1_head_t *h = bm_http1_head(c->parser);
    size_t limit = h->content_length > 0 ? (size_t)h->content_length : c->srv->lim.max_body_bytes;
    if (!body_reserve(c, n, limit))
        return 503;
    b = c->req.body;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

static const bm_http1_callbacks_t parser_cbs = {on_head, on_body, NULL};

/* ---- request processing ------------------------------------------------------------ */

void bm_srv_split_target(bm_req_t *r)
{
    const char *t = r->target ? r->target : r->head->target;
    size_t n = strlen(t);
    const char *path = t;
    /* absolute-form (RFC 9112 3.2.2): the path starts after the authority */
    if ((n > 7 && strncasecmp(t, "http://", 7) == 0) ||
        (n > 8 && strncasecmp(t, "https://", 8) == 0)) {
        const char *a = strstr(t, "//") + 2;
        path = a + strcspn(a, "/?");
    }
    const char *q = strchr(path, '?');
    r->path = path;
    r->path_len = q ? (size_t)(q - path) : strlen(path);
    r->query = q ? q + 1 : NULL;
    r->query_len = q ? strlen(q + 1) : 0;
    if (r->path_len == 0) {
        r->path = "/";
        r->path_len = 1;
    }
}

static void dispatch(conn_t *c)
{
    bm_server_t *srv = c->srv;
    bm_req_t *r = &c->req;
    const bm_http1_head_t *h = bm_http1_head(c->parser);
    bm_buf_t *body = r->body;
    if (body)
        body->data[body->len] = '\0';
    uint64_t start = r->start_us;
    *r = (bm_req_t){.conn = c, .head = h, .body = body, .start_us = start, .owned = true};
    bm_srv_split_target(r);
    c->fresh = false;
    c->keep_alive = h->keep_alive && !srv->shutting_down && !c->peer_eof;
    c->drain_armed = c->pending > srv->opts.write_high_water;
    clear_deadline(c);
    bm_srv_conn_hold(c); /* the request's reference, dropped when it ends */
    srv->stats.requests++;
    srv->handler(r, srv->ud);
}

/*
 * Parses buffered input and hands complete requests to the handler, one at a time, until
 * input runs out, a handler keeps its request, the output queue is over high water, or
 * the connection is to be closed. Then flushes the output in one go.
 */
static void process_input(conn_t *c)
{
    while (c->st != CONN_CLOSED && !c->req.owned) {
        bm_http1_phase_t ph = bm_http1_phase(c->parser);
        if (ph == BM_HTTP1_COMPLETE) {
            dispatch(c);
            continue;
        }
        if (ph == BM_HTTP1_FAILED && !c->error_sent) {
            bm_srv_conn_send_error(c, bm_http1_error_status(c->parser),
                                   bm_http1_error_message(c->parser));
            continue;
        }
        /* close_after waits for a request being received (graceful shutdown lets it
         * finish), unless the server already answered it with an error. */
        if (c->st >= CONN_CLOSE_AFTER && (ph == BM_HTTP1_IDLE || c->error_sent || c->broken)) {
            bm_srv_conn_set_state(c, CONN_FINISHING);
            break;
        }
        if (c->pending > c->srv->opts.write_high_water)
            break; /* resumed once the queue drained */
        if (c->in_off == c->in_len) {
            if (c->peer_eof) {
                /* Half-closed: nothing more will come. A partial request is dropped. */
                if (ph == BM_HTTP1_IDLE)
                    bm_srv_conn_set_state(c, CONN_CLOSE_AFTER);
                else
                    bm_srv_conn_close(c);
                continue;
            }
            break;
        }
        size_t used = 0;
        bm_http1_feed(c->parser, c->in + c->in_off, c->in_len - c->in_off, &used);
        c->in_off += used;
    }
}

static void conn_process(conn_t *c)
{
    if (c->in_process || c->st == CONN_CLOSED)
        return;
    bm_srv_conn_hold(c);
    for (;;) {
        c->in_process = true;
        process_input(c);
        c->in_process = false; /* callbacks run by the flush may queue more */
        bm_srv_conn_flush(c);
        /* uv_try_write may have drained the queue that stopped the loop. */
        if (c->st >= CONN_FINISHING || c->req.owned || c->in_off == c->in_len ||
            c->pending > c->srv->opts.write_high_water)
            break;
    }
    if (c->st != CONN_CLOSED) {
        bm_srv_conn_release_input(c);
        conn_update_deadline(c, false);
        conn_update_reading(c);
    }
    if (c->tls && c->st != CONN_CLOSED && bm_tls_conn_has_input(c->tls))
        bm_srv_tls_pump(c); /* plaintext that did not fit before */
    bm_srv_conn_unref(c);
}

/* ---- accepting --------------------------------------------------------------------- */

static void on_connection(uv_stream_t *ls, int status)
{
    bm_server_t *srv = ls->data;
    if (status == UV_EMFILE || status == UV_ENFILE) {
        bm_log_limited(&srv->log_lim, BM_LOG_ERROR,
                       "server: cannot accept a connection: %s (%zu client connections open); "
                       "raise the limit of open files (LimitNOFILE=, ulimit -n) or lower "
                       "server.maxConnections",
                       uv_strerror(status), srv->nconns);
        return;
    }
    if (status < 0) {
        bm_log_limited(&srv->log_lim, BM_LOG_WARN, "server: accept failed: %s",
                       uv_strerror(status));
        return;
    }
    conn_t *c = calloc(1, sizeof *c);
    if (!c) {
        bm_log_limited(&srv->log_lim, BM_LOG_ERROR, "server: out of memory accepting");
        return;
    }
    c->srv = srv;
    bm_link_init(&c->link);
    bm_link_init(&c->dirty_link);
    c->refs = 1; /* the handles' reference */
    c->handles_open = 2;
    c->fresh = true;
    c->keep_alive = true;
    uv_tcp_init(srv->loop, &c->tcp);
    uv_timer_init(srv->loop, &c->timer);
    c->tcp.data = c;
    c->timer.data = c;
    srv->nalloc++;
    int rc = uv_accept(ls, (uv_stream_t *)&c->tcp);
    strcpy(c->peer, "unknown");
    struct sockaddr_storage ss;
    int sl = sizeof ss;
    if (rc == 0 && uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET6)
            uv_ip6_name((struct sockaddr_in6 *)&ss, c->peer, sizeof c->peer);
        else if (ss.ss_family == AF_INET)
            uv_ip4_name((struct sockaddr_in *)&ss, c->peer, sizeof c->peer);
    }
    bool refuse = rc < 0 || srv->shutting_down || srv->nconns >= srv->opts.max_connections;
    if (rc == 0 && srv->nconns >= srv->opts.max_connections)
        bm_log_limited(&srv->log_lim, BM_LOG_WARN, "server: %zu connections open, refusing another",
                       srv->nconns);
    if (!refuse) {
        c->counted = bm_peers_take(srv->peers, c->peer, srv->opts.max_connections_per_client);
        refuse = !c->counted;
        if (refuse)
            bm_log_limited(&srv->log_lim, BM_LOG_WARN,
                           "server: %s holds %u connections (server.maxConnectionsPerClient), "
                           "refusing another",
                           c->peer, bm_peers_count(srv->peers, c->peer));
    }
    if (!refuse) {
        c->parser = bm_http1_new(&srv->lim, &parser_cbs, c);
        refuse = c->parser == NULL;
    }
    if (!refuse && srv->tls) {
        c->tls = bm_tls_conn_new(srv->tls); /* the context of this moment, kept to the end */
        refuse = c->tls == NULL;
    }
    if (rc == 0)
        srv->stats.accepted++;
    if (refuse) {
        srv->stats.refused += rc == 0;
        if (c->counted)
            bm_peers_release(srv->peers, c->peer);
        c->counted = false;
        bm_srv_conn_set_state(c, CONN_CLOSED);
        uv_close((uv_handle_t *)&c->tcp, on_conn_handle_closed);
        uv_close((uv_handle_t *)&c->timer, on_conn_handle_closed);
        return;
    }
    c->req.conn = c;
    uv_tcp_nodelay(&c->tcp, 1);
    bm_list_push_front(&srv->conns, &c->link);
    srv->nconns++;
    conn_update_deadline(c, false);
    conn_update_reading(c);
    if (!c->reading)
        bm_srv_conn_close(c);
}

/* ---- the server ---------------------------------------------------------------------- */

static void srv_free_now(bm_server_t *srv)
{
    bm_tls_ctx_unref(srv->tls);
    for (size_t i = 0; i < srv->npool; i++)
        free(srv->pool[i]);
    bm_peers_free(srv->peers);
    free(srv);
}

static void srv_maybe_free(bm_server_t *srv)
{
    if (srv->freeing && srv->handles_open == 0 && srv->nalloc == 0)
        srv_free_now(srv);
}

static void srv_maybe_done(bm_server_t *srv)
{
    if (srv->freeing) {
        srv_maybe_free(srv);
        return;
    }
    if (!srv->shutting_down || srv->done_called || srv->done_pending || !srv->listener_closed ||
        srv->nalloc > 0)
        return;
    /* Run `done` from the check handle: never from inside a handler's call. */
    srv->done_pending = true;
    uv_ref((uv_handle_t *)&srv->idle);
    uv_idle_start(&srv->idle, on_idle);
}

static void on_check(uv_check_t *h)
{
    bm_server_t *srv = h->data;
    while (!bm_list_empty(&srv->dirty)) {
        conn_t *c = bm_list_first(&srv->dirty, conn_t, dirty_link);
        dirty_remove(c);
        bm_srv_conn_hold(c);
        if (c->st == CONN_CLOSED) {
            conn_fire_abort(c);
        } else if (c->broken) {
            bm_srv_conn_close(c);
        } else if (c->need_process) {
            c->need_process = false;
            conn_process(c);
        } else {
            bm_srv_conn_flush(c);
        }
        bm_srv_conn_unref(c);
    }
    if (srv->done_pending) {
        srv->done_pending = false;
        srv->done_called = true;
        uv_idle_stop(&srv->idle);
        uv_unref((uv_handle_t *)&srv->idle);
        uv_timer_stop(&srv->grace);
        if (srv->done)
            srv->done(srv, srv->done_ud); /* may free the server */
        return;
    }
    if (bm_list_empty(&srv->dirty))
        uv_idle_stop(&srv->idle);
}

/* The options with a zero field taken as its default (a limit of nothing is not meant). */
static void set_opts(bm_server_t *srv, const bm_server_opts_t *opts)
{
    bm_server_opts_t def;
    bm_server_opts_default(&def);
    srv->opts = opts ? *opts : def;
    if (!srv->opts.max_target_bytes)
        srv->opts.max_target_bytes = def.max_target_bytes;
    if (!srv->opts.max_header_bytes)
        srv->opts.max_header_bytes = def.max_header_bytes;
    if (!srv->opts.max_body_bytes)
        srv->opts.max_body_bytes = def.max_body_bytes;
    if (!srv->opts.header_timeout_ms)
        srv->opts.header_timeout_ms = def.header_timeout_ms;
    if (!srv->opts.body_timeout_ms)
        srv->opts.body_timeout_ms = def.body_timeout_ms;
    if (!srv->opts.idle_timeout_ms)
        srv->opts.idle_timeout_ms = def.idle_timeout_ms;
    if (!srv->opts.max_connections)
        srv->opts.max_connections = def.max_connections;
    if (!srv->opts.max_connections_per_client)
        srv->opts.max_connections_per_client = def.max_connections_per_client;
    if (!srv->opts.body_deadline_ms)
        srv->opts.body_deadline_ms = def.body_deadline_ms;
    if (!srv->opts.send_timeout_ms)
        srv->opts.send_timeout_ms = def.send_timeout_ms;
    if (!srv->opts.write_high_water)
        srv->opts.write_high_water = def.write_high_water;
    srv->lim = (bm_http1_limits_t){srv->opts.max_target_bytes, srv->opts.max_header_bytes,
                                   srv->opts.max_body_bytes};
}

void bm_server_set_opts(bm_server_t *srv, const bm_server_opts_t *opts)
{
    set_opts(srv, opts);
}

bm_server_t *bm_server_new(uv_loop_t *loop, const bm_server_opts_t *opts,
                           bm_server_handler_fn handler, void *ud)
{
    bm_server_t *srv = calloc(1, sizeof *srv);
    if (!srv)
        return NULL;
    bm_link_init(&srv->conns);
    bm_link_init(&srv->dirty);
    set_opts(srv, opts);
    srv->peers = bm_peers_new();
    if (!srv->peers) {
        free(srv);
        return NULL;
    }
    srv->loop = loop;
    srv->handler = handler;
    srv->ud = ud;
    srv->port = -1;

    uv_tcp_init(loop, &srv->listener);
    uv_timer_init(loop, &srv->grace);
    uv_check_init(loop, &srv->check);
    uv_idle_init(loop, &srv->idle);
    srv->listener.data = srv;
    srv->grace.data = srv;
    srv->check.data = srv;
    srv->idle.data = srv;
    srv->handles_open = 4;
    uv_check_start(&srv->check, on_check);
    uv_unref((uv_handle_t *)&srv->check);
    uv_unref((uv_handle_t *)&srv->idle);
    return srv;
}

/* SO_REUSEPORT must be set before bind, so the listener's socket is made here and given
 * to libuv (1.44 has no flag for it). Returns 0 or a libuv error code. */
static int open_reuse_port(bm_server_t *srv, int family)
{
    int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return uv_translate_sys_error(errno);
    int on = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof on) != 0) {
        int e = errno;
        close(fd);
        return uv_translate_sys_error(e);
    }
    int rc = uv_tcp_open(&srv->listener, fd);
    if (rc < 0)
        close(fd);
    return rc;
}

static int listening(bm_server_t *srv, const char *host);

int bm_server_listen(bm_server_t *srv, const char *host, int port)
{
    if (srv->listening || srv->shutting_down || srv->freeing || port < 0 || port > 65535)
        return BM_EINVAL;
    struct sockaddr_storage ss;
    char h[64];
    if (!host || strcmp(host, "localhost") == 0)
        host = "127.0.0.1";
    size_t hl = strlen(host);
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']' && hl - 2 < sizeof h) {
        memcpy(h, host + 1, hl - 2);
        h[hl - 2] = '\0';
        host = h;
    }
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) != 0 &&
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss) != 0) {
        bm_log(BM_LOG_ERROR, "server: cannot listen on '%s': not an IP address", host);
        return BM_EINVAL;
    }
    int rc = srv->opts.reuse_port ? open_reuse_port(srv, ss.ss_family) : 0;
    if (rc == 0)
        rc = uv_tcp_bind(&srv->listener, (struct sockaddr *)&ss, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&srv->listener, 511, on_connection);
    if (rc < 0) {
        bm_log(BM_LOG_ERROR, "server: cannot listen on %s:%d: %s", host, port, uv_strerror(rc));
        return bm_err_from_uv(rc);
    }
    return listening(srv, host);
}

int bm_server_listen_fd(bm_server_t *srv, int fd)
{
    if (srv->listening || srv->shutting_down || srv->freeing || fd < 0)
        return BM_EINVAL;
    int rc = uv_tcp_open(&srv->listener, fd);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&srv->listener, 511, on_connection);
    if (rc < 0) {
        bm_log(BM_LOG_ERROR, "server: cannot listen on the socket handed over (fd %d): %s", fd,
               uv_strerror(rc));
        return bm_err_from_uv(rc);
    }
    return listening(srv, "the socket handed over");
}

/* The bound port, for logs and bm_server_port. */
static int listening(bm_server_t *srv, const char *host)
{
    struct sockaddr_storage ss;
    int sl = sizeof ss;
    if (uv_tcp_getsockname(&srv->listener, (struct sockaddr *)&ss, &sl) == 0)
        srv->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                   : ((struct sockaddr_in *)&ss)->sin_port);
    srv->listening = true;
    bm_log(BM_LOG_INFO, "server: listening on %s port %d%s", host, srv->port,
           srv->tls ? " (TLS)" : "");
    return 0;
}

int bm_server_port(const bm_server_t *srv)
{
    return srv->listening ? srv->port : -1;
}

size_t bm_server_connection_count(const bm_server_t *srv)
{
    return srv->nconns;
}

void bm_server_stats(const bm_server_t *srv, bm_server_stats_t *out)
{
    *out = srv->stats;
}

void bm_server_on_end(bm_server_t *srv, void (*fn)(const bm_req_summary_t *s, void *ud), void *ud)
{
    srv->on_end = fn;
    srv->on_end_ud = ud;
}

static void on_srv_handle_closed(uv_handle_t *h)
{
    bm_server_t *srv = h->data;
    srv->handles_open--;
    if (h == (uv_handle_t *)&srv->listener) {
        srv->listener_closed = true;
        srv_maybe_done(srv);
        return;
    }
    srv_maybe_free(srv);
}

static void on_grace(uv_timer_t *t)
{
    bm_server_t *srv = t->data;
    if (srv->nconns)
        bm_log(BM_LOG_INFO, "server: grace period over, closing %zu connections", srv->nconns);
    while (!bm_list_empty(&srv->conns))
        bm_srv_conn_close(bm_list_first(&srv->conns, conn_t, link));
}

void bm_server_shutdown(bm_server_t *srv, uint32_t grace_ms,
                        void (*done)(bm_server_t *srv, void *ud), void *ud)
{
    if (srv->shutting_down || srv->freeing)
        return;
    srv->shutting_down = true;
    srv->done = done;
    srv->done_ud = ud;
    if (!srv->listener_closing) {
        srv->listener_closing = true;
        uv_close((uv_handle_t *)&srv->listener, on_srv_handle_closed);
    }
    bm_link_t *l, *nx;
    bm_list_for_each_safe (l, nx, &srv->conns) {
        conn_t *c = bm_list_entry(l, conn_t, link);
        c->keep_alive = false;
        if (c->req.owned || c->st >= CONN_FINISHING)
            continue; /* closes after its answer, or is closing already */
        if (bm_http1_phase(c->parser) == BM_HTTP1_IDLE && c->pending == 0) {
            /* A connection accepted a moment ago whose request is still on its way: closing
             * it would fail a request the client sent correctly (its connect raced the
             * shutdown). It gets its one answer (keep_alive is off), within the header
             * timeout and the grace period. A keep-alive connection between requests is
             * closed: a client retries a request on a reused connection that closes. */
            if (c->fresh && c->in_len == c->in_off)
                continue;
            bm_srv_conn_close(c); /* idle */
            continue;
        }
        bm_srv_conn_set_state(c, CONN_CLOSE_AFTER);
        bm_srv_conn_schedule(c);
    }
    uv_timer_start(&srv->grace, on_grace, grace_ms, 0);
    srv_maybe_done(srv);
}

void bm_server_free(bm_server_t *srv)
{
    if (!srv || srv->freeing)
        return;
    if (!bm_list_empty(&srv->conns))
        bm_log(BM_LOG_ERROR, "server: freed with %zu connections open", srv->nconns);
    srv->freeing = true;
    while (!bm_list_empty(&srv->conns))
        bm_srv_conn_close(bm_list_first(&srv->conns, conn_t, link));
    if (!srv->listener_closing) {
        srv->listener_closing = true;
        uv_close((uv_handle_t *)&srv->listener, on_srv_handle_closed);
    }
    uv_close((uv_handle_t *)&srv->grace, on_srv_handle_closed);
    uv_close((uv_handle_t *)&srv->check, on_srv_handle_closed);
    uv_close((uv_handle_t *)&srv->idle, on_srv_handle_closed);
}
