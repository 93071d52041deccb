/* SPDX-License-Identifier: MIT */
/*
 * server_resp: the request and response API of the HTTP server (see server.h), and the
 * response heads it queues on the connection (server.c).
 */
#include "http/server_int.h"

#include <linux/sockios.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <time.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/defaults.h"
#include "base/err.h"
#include "base/log.h"
#include "base/url.h"
#include "http/http1.h"

/* ---- small helpers ------------------------------------------------------------------- */

static const struct {
    int status;
    const char *reason;
} reasons[] = {
    {100, "Continue"},
    {101, "Switching Protocols"},
    {200, "OK"},
    {201, "Created"},
    {202, "Accepted"},
    {203, "Non-Authoritative Information"},
    {204, "No Content"},
    {205, "Reset Content"},
    {206, "Partial Content"},
    {300, "Multiple Choices"},
    {301, "Moved Permanently"},
    {302, "Found"},
    {303, "See Other"},
    {304, "Not Modified"},
    {307, "Temporary Redirect"},
    {308, "Permanent Redirect"},
    {400, "Bad Request"},
    {401, "Unauthorized"},
    {403, "Forbidden"},
    {404, "Not Found"},
    {405, "Method Not Allowed"},
    {406, "Not Acceptable"},
    {408, "Request Timeout"},
    {409, "Conflict"},
    {410, "Gone"},
    {411, "Length Required"},
    {412, "Precondition Failed"},
    {413, "Content Too Large"},
    {414, "URI Too Long"},
    {415, "Unsupported Media Type"},
    {416, "Range Not Satisfiable"},
    {417, "Expectation Failed"},
    {421, "Misdirected Request"},
    {422, "Unprocessable Content"},
    {425, "Too Early"},
    {426, "Upgrade Required"},
    {428, "Precondition Required"},
    {429, "Too Many Requests"},
    {431, "Request Header Fields Too Large"},
    {500, "Internal Server Error"},
    {501, "Not Implemented"},
    {502, "Bad Gateway"},
    {503, "Service Unavailable"},
    {504, "Gateway Timeout"},
    {505, "HTTP Version Not Supported"},
};

const char *bm_http_reason(int status)
{
    for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++)
        if (reasons[i].status == status)
            return reasons[i].reason;
    return "";
}

static char *put(char *w, const void *p, size_t n)
{
    memcpy(w, p, n);
    return w + n;
}

#define PUT_LIT(w, lit) put((w), (lit), sizeof(lit) - 1)

static char *put_u64(char *w, uint64_t v)
{
    return w + bm_u64_dec(w, v);
}

static char *put_hex(char *w, uint64_t v)
{
    static const char hex[] = "0123456789abcdef";
    char tmp[20];
    size_t i = sizeof tmp;
    do {
        tmp[--i] = hex[v & 15];
        v >>= 4;
    } while (v);
    return put(w, tmp + i, sizeof tmp - i);
}

static const char *update_date(bm_server_t *srv, size_t *len)
{
    time_t now = time(NULL);
    if (now != srv->date_sec || srv->date_len == 0) {
        struct tm tm;
        gmtime_r(&now, &tm);
        srv->date_len =
            strftime(srv->date, sizeof srv->date, "Date: %a, %d %b %Y %H:%M:%S GMT\r\n", &tm);
        srv->date_sec = now;
    }
    *len = srv->date_len;
    return srv->date;
}

static bool is_token(const char *s, size_t n)
{
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++) /* the tchar table: every field of every answer head */
        if (!bm_tchar[(unsigned char)s[i]])
            return false;
    return true;
}

static bool is_safe_value(const char *s, size_t n)
{
    /* Eight bytes at a time: x ^ c has a zero byte where x holds c (the "has zero" word
     * trick); every field of every answer head comes through here, once per client */
    const uint64_t ones = 0x0101010101010101u, highs = 0x8080808080808080u;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t x;
        memcpy(&x, s + i, 8);
        uint64_t cr = x ^ (ones * '\r'), lf = x ^ (ones * '\n');
        if (((x - ones) & ~x & highs) | ((cr - ones) & ~cr & highs) | ((lf - ones) & ~lf & highs))
            return false;
    }
    for (; i < n; i++)
        if (s[i] == '\r' || s[i] == '\n' || s[i] == '\0')
            return false;
    return true;
}

/* ---- response heads ------------------------------------------------------------------ */

typedef struct head_spec {
    int status;
    const bm_hdrs_t *hdrs;
    const bm_hdrs_t *extra; /* the request's own additions (CORS), or NULL */
    const char *content_type;
    resp_mode_t mode;
    uint64_t content_length;
    bool keep_alive;
    bool http10;
} head_spec_t;

/* Appends the status line and header fields to the output. */
static bool queue_head(conn_t *c, const head_spec_t *h)
{
    bm_server_t *srv = c->srv;
    const char *reason = bm_http_reason(h->status);
    size_t reason_len = strlen(reason);
    size_t date_len;
    const char *date = update_date(srv, &date_len);
    bool have_date = false;
    size_t ct_len = h->content_type ? strlen(h->content_type) : 0;
    size_t need = 16 + reason_len + date_len + 20 + ct_len + 64 + 32 + 2;
    if (h->hdrs) {
        for (size_t i = 0; i < h->hdrs->n; i++) {
            const bm_header_t *f = &h->hdrs->items[i];
            need += f->name_len + f->value_len + 4;
            if (f->name_len == 4 && bm_ascii_case_eq(f->name, "date", 4))
                have_date = true;
        }
    }
    for (size_t i = 0; h->extra && i < h->extra->n; i++)
        need += h->extra->items[i].name_len + h->extra->items[i].value_len + 4;
    char *w0 = bm_srv_acc_reserve(c, need);
    if (!w0)
        return false;
    char *w = PUT_LIT(w0, "HTTP/1.1 ");
    w = put_u64(w, (uint64_t)h->status);
    *w++ = ' ';
    w = put(w, reason, reason_len);
    w = PUT_LIT(w, "\r\n");
    if (!have_date)
        w = put(w, date, date_len);
    if (h->content_type && is_safe_value(h->content_type, ct_len)) {
        w = PUT_LIT(w, "Content-Type: ");
        w = put(w, h->content_type, ct_len);
        w = PUT_LIT(w, "\r\n");
    }
    const bm_hdrs_t *lists[2] = {h->hdrs, h->extra};
    for (size_t l = 0; l < 2; l++) {
        for (size_t i = 0; lists[l] && i < lists[l]->n; i++) {
            const bm_header_t *f = &lists[l]->items[i];
            if (bm_header_is_hop_by_hop(f->name, f->name_len))
                continue;
            if (!is_token(f->name, f->name_len) || !is_safe_value(f->value, f->value_len)) {
                bm_log_limited(&srv->log_lim, BM_LOG_WARN,
                               "server: dropped a response header field with invalid bytes");
                continue;
            }
            w = put(w, f->name, f->name_len);
            w = PUT_LIT(w, ": ");
            w = put(w, f->value, f->value_len);
            w = PUT_LIT(w, "\r\n");
        }
    }
    if (h->mode == RESP_FIXED) {
        w = PUT_LIT(w, "Content-Length: ");
        w = put_u64(w, h->content_length);
        w = PUT_LIT(w, "\r\n");
    } else if (h->mode == RESP_CHUNKED) {
        w = PUT_LIT(w, "Transfer-Encoding: chunked\r\n");
    }
    if (!h->keep_alive)
        w = PUT_LIT(w, "Connection: close\r\n");
    else if (h->http10)
        w = PUT_LIT(w, "Connection: keep-alive\r\n");
    w = PUT_LIT(w, "\r\n");
    bm_srv_acc_commit(c, (size_t)(w - w0));
    return true;
}

/* A JSON error body {"code":N,"message":"..."} (NULL on allocation failure). */
static bm_buf_t *error_body(int status, const char *msg)
{
    bm_str_t s = BM_STR_INIT;
    bm_str_reserve(&s, 32 + strlen(msg));
    bm_str_puts(&s, "{\"code\":");
    bm_str_u64(&s, (uint64_t)status);
    bm_str_puts(&s, ",\"message\":");
    bm_str_json_string(&s, msg, strlen(msg));
    bm_str_putc(&s, '}');
    return bm_str_finish(&s);
}

/* An answer of the server itself, outside any handler: always closes the connection. */
void bm_srv_conn_send_error(conn_t *c, int status, const char *msg)
{
    if (c->st == CONN_CLOSED)
        return;
    c->keep_alive = false;
    bm_srv_conn_set_state(c, CONN_CLOSE_AFTER);
    c->error_sent = true;
    c->srv->stats.rejected++;
    bm_buf_t *body = error_body(status, msg);
    if (!body) {
        bm_srv_conn_close(c);
        return;
    }
    head_spec_t h = {.status = status,
                     .content_type = "application/json",
                     .mode = RESP_FIXED,
                     .content_length = body->len,
                     .keep_alive = false};
    if (!queue_head(c, &h) || !bm_srv_queue_buf(c, body, 0, body->len)) {
        bm_buf_unref(body);
        bm_srv_conn_close(c);
        return;
    }
    bm_buf_unref(body);
    bm_srv_conn_mark_dirty(c);
}

/* ---- the request ----------------------------------------------------------------- */

const char *bm_req_method(const bm_req_t *req)
{
    return req->head->method;
}

const char *bm_req_target(const bm_req_t *req)
{
    return req->target ? req->target : req->head->target;
}

int bm_req_add_resp_fields(bm_req_t *req, const bm_hdrs_t *h)
{
    if (!req->extra) {
        req->extra = malloc(sizeof *req->extra);
        if (!req->extra)
            return BM_ENOMEM;
        bm_hdrs_init(req->extra);
    }
    for (size_t i = 0; i < h->n; i++)
        if (bm_hdrs_add(req->extra, h->items[i].name, h->items[i].name_len, h->items[i].value,
                        h->items[i].value_len) != 0)
            return BM_ENOMEM;
    return 0;
}

int bm_req_set_target(bm_req_t *req, const char *target, size_t len)
{
    if (len == 0 || target[0] != '/' || memchr(target, '\0', len))
        return BM_EINVAL;
    char *t = malloc(len + 1);
    if (!t)
        return BM_ENOMEM;
    memcpy(t, target, len);
    t[len] = '\0';
    free(req->target);
    req->target = t;
    bm_srv_split_target(req);
    return 0;
}

const char *bm_req_path(const bm_req_t *req, size_t *len)
{
    if (len)
        *len = req->path_len;
    return req->path;
}

const char *bm_req_query(const bm_req_t *req, size_t *len)
{
    if (len)
        *len = req->query_len;
    return req->query;
}

int bm_req_query_param(const bm_req_t *req, const char *name, char *out, size_t cap)
{
    return bm_url_query_param(req->query, req->query_len, name, out, cap);
}

const bm_hdrs_t *bm_req_headers(const bm_req_t *req)
{
    return req->head->headers;
}

size_t bm_req_remove_header(bm_req_t *req, const char *name)
{
    /* the fields belong to this connection's parser, which reads them no more once the
     * request was dispatched: removing one in place is safe */
    return bm_hdrs_remove((bm_hdrs_t *)req->head->headers, name);
}

const char *bm_req_header(const bm_req_t *req, const char *name)
{
    return bm_hdrs_get(req->head->headers, name);
}

bm_buf_t *bm_req_body(const bm_req_t *req)
{
    return req->body && req->body->len ? req->body : NULL;
}

const char *bm_req_peer(const bm_req_t *req)
{
    return req->conn->peer;
}

uint64_t bm_req_start_us(const bm_req_t *req)
{
    return req->start_us;
}

bool bm_req_client_gone(const bm_req_t *req)
{
    return req->conn->st == CONN_CLOSED;
}

void bm_req_on_abort(bm_req_t *req, void (*cb)(bm_req_t *req, void *ud), void *ud)
{
    conn_t *c = req->conn;
    req->abort_cb = cb;
    req->abort_ud = ud;
    /* Registered after the client left: run it from the loop, never from inside this call. */
    if (cb && c->st == CONN_CLOSED && req->owned && !req->aborted)
        bm_srv_dirty_add(c);
}

void bm_req_on_end(bm_req_t *req, void (*cb)(void *ud), void *ud)
{
    req->end_cb = cb;
    req->end_ud = ud;
}

void bm_req_set_route_class(bm_req_t *req, const char *cls)
{
    req->route_class = cls;
}

void bm_req_mask_path_prefix(bm_req_t *req, size_t n)
{
    req->masked_path = n;
}

void bm_req_set_client(bm_req_t *req, const char *addr)
{
    snprintf(req->client, sizeof req->client, "%s", addr ? addr : "");
}

void bm_req_set_scope(bm_req_t *req, void *scope)
{
    req->scope = scope;
}

void bm_req_add_upstream(bm_req_t *req, int index)
{
    if (index >= 0 && index < 64)
        req->upstreams |= (uint64_t)1 << index;
}

void bm_req_set_data(bm_req_t *req, void *data)
{
    req->data = data;
}

void *bm_req_get_data(const bm_req_t *req)
{
    return req->data;
}

/* ---- the response ------------------------------------------------------------------ */

/* Allocation failed half-way through a response: close from the loop, not from here. */
static void conn_break(conn_t *c)
{
    bm_srv_conn_set_state(c, CONN_CLOSE_AFTER);
    c->keep_alive = false;
    c->broken = true;
    bm_srv_dirty_add(c);
}

static int resp_start(bm_req_t *r, int status, const bm_hdrs_t *hdrs, const char *ctype,
                      int64_t content_length)
{
    conn_t *c = r->conn;
    if (!r->owned || r->started || status < 200 || status > 599)
        return BM_EINVAL;
    r->started = true;
    r->status = status;
    if (c->st == CONN_CLOSED)
        return BM_ECLOSED;
    const bm_http1_head_t *h = r->head;
    head_spec_t hs = {.status = status, .hdrs = hdrs, .extra = r->extra, .content_type = ctype};
    hs.http10 = h->version_minor == 0;
    if (status == 204 || status == 304) {
        hs.mode = RESP_NOBODY;
        r->suppress_body = true;
    } else if (content_length >= 0) {
        hs.mode = RESP_FIXED;
        hs.content_length = (uint64_t)content_length;
        r->remaining = (uint64_t)content_length;
    } else if (!hs.http10) {
        hs.mode = RESP_CHUNKED;
    } else {
        hs.mode = RESP_UNTIL_CLOSE;
        if (!h->is_head)
            c->keep_alive = false;
    }
    if (h->is_head)
        r->suppress_body = true;
    if (hdrs) {
        const char *cv = bm_hdrs_get(hdrs, "connection");
        if (cv && bm_header_listed_in_connection(cv, "close", 5))
            c->keep_alive = false;
    }
    if (c->srv->shutting_down)
        c->keep_alive = false;
    hs.keep_alive = c->keep_alive;
    r->mode = hs.mode;
    if (!queue_head(c, &hs)) {
        conn_break(c);
        return BM_ENOMEM;
    }
    bm_srv_arm_drain(c);
    bm_srv_conn_mark_dirty(c);
    return 0;
}

int bm_resp_start(bm_req_t *req, int status, const bm_hdrs_t *hdrs, int64_t content_length)
{
    return resp_start(req, status, hdrs, NULL, content_length);
}

/* Queues body bytes from `b` (referenced) or `p` (copied). */
static int resp_body(bm_req_t *r, bm_buf_t *b, const void *p, size_t n)
{
    conn_t *c = r->conn;
    if (!r->owned || !r->started)
        return BM_EINVAL;
    if (c->st == CONN_CLOSED || c->broken)
        return BM_ECLOSED;
    if (n == 0 || r->suppress_body)
        return 0;
    int rc = 0;
    bool ok = true;
    r->body_bytes += n;
    switch (r->mode) {
    case RESP_FIXED:
        if (n > r->remaining) {
            bm_log_limited(&c->srv->log_lim, BM_LOG_WARN,
                           "server: response body longer than its Content-Length; cut");
            n = (size_t)r->remaining;
            rc = BM_ETOOBIG;
        }
        r->remaining -= n;
        ok = b ? bm_srv_queue_buf(c, b, 0, n) : bm_srv_queue_copy(c, p, n);
        break;
    case RESP_CHUNKED: {
        char hdr[24];
        char *w = put_hex(hdr, n);
        w = PUT_LIT(w, "\r\n");
        ok = bm_srv_queue_copy(c, hdr, (size_t)(w - hdr)) &&
             (b ? bm_srv_queue_buf(c, b, 0, n) : bm_srv_queue_copy(c, p, n)) &&
             bm_srv_queue_copy(c, "\r\n", 2);
        break;
    }
    case RESP_UNTIL_CLOSE:
        ok = b ? bm_srv_queue_buf(c, b, 0, n) : bm_srv_queue_copy(c, p, n);
        break;
    default:
        break;
    }
    if (!ok) {
        conn_break(c);
        return BM_ENOMEM;
    }
    bm_srv_arm_drain(c);
    bm_srv_conn_mark_dirty(c);
    return rc;
}

int bm_resp_write(bm_req_t *req, bm_buf_t *b)
{
    if (!b)
        return req->owned && req->started ? 0 : BM_EINVAL;
    return resp_body(req, b, NULL, b->len);
}

int bm_resp_write_copy(bm_req_t *req, const void *p, size_t n)
{
    return resp_body(req, NULL, p, n);
}

/* Forgets the request (the handler gave it back) and drops its reference. */
static void req_release(conn_t *c)
{
    bm_req_t *r = &c->req;
    r->owned = false;
    free(r->target);
    r->target = NULL;
    if (r->extra) {
        bm_hdrs_dispose(r->extra);
        free(r->extra);
        r->extra = NULL;
    }
    bm_buf_unref(r->body);
    r->body = NULL;
    r->abort_cb = NULL;
    r->drain_cb = NULL;
    r->data = NULL;
    void (*end_cb)(void *) = r->end_cb;
    r->end_cb = NULL;
    bm_http1_next(c->parser);
    if (end_cb)
        end_cb(r->end_ud); /* the request is gone: nothing of it may be touched any more */
    bm_srv_conn_unref(c);
}

/* Tells the end listener what the request was. */
static void report_end(bm_req_t *r, bool abort)
{
    bm_server_t *srv = r->conn->srv;
    if (!srv->on_end)
        return;
    /* a credential in the path never reaches a listener (the access log) */
    char masked[8192];
    const char *target = r->head->target;
    if (r->masked_path && r->masked_path <= strlen(target)) {
        snprintf(masked, sizeof masked, "/***%s", target + r->masked_path);
        target = masked;
    }
    bm_req_summary_t s = {
        .method = r->head->method,
        .target = target,
        .peer = r->client[0] ? r->client : r->conn->peer,
        .route_class = r->route_class,
        .scope = r->scope,
        .status = r->started ? r->status : 0,
        .body_bytes = r->body_bytes,
        .duration_us = bm_clock_mono_us() - r->start_us,
        .upstreams = r->upstreams,
        .cut = abort || r->conn->st == CONN_CLOSED,
    };
    srv->on_end(&s, srv->on_end_ud);
}

static void resp_finish(bm_req_t *r, bool abort)
{
    conn_t *c = r->conn;
    if (!r->owned) {
        bm_log(BM_LOG_ERROR, "server: a request was ended twice");
        return;
    }
    report_end(r, abort);
    bm_srv_conn_hold(c);
    if (c->st != CONN_CLOSED) {
        if (abort) {
            c->keep_alive = false;
        } else if (r->mode == RESP_FIXED && r->remaining > 0 && !r->suppress_body) {
            c->keep_alive = false; /* a truncated body: only the close can say so */
        } else if (r->mode == RESP_CHUNKED && !r->suppress_body) {
            if (!bm_srv_queue_copy(c, "0\r\n\r\n", 5))
                conn_break(c);
        } else if (r->mode == RESP_UNTIL_CLOSE && !r->suppress_body) {
            c->keep_alive = false;
        }
        if (!c->keep_alive || c->srv->shutting_down || c->broken)
            bm_srv_conn_set_state(c, CONN_CLOSE_AFTER);
    }
    req_release(c);
    if (c->st != CONN_CLOSED && !c->in_process)
        bm_srv_conn_schedule(c); /* the flush, the next pipelined request, or the close */
    bm_srv_conn_unref(c);
}

static void resp_json_error(bm_req_t *r, int status, const char *msg)
{
    bm_buf_t *body = error_body(status, msg);
    if (!body) {
        resp_finish(r, true);
        return;
    }
    resp_start(r, status, NULL, "application/json", (int64_t)body->len);
    resp_body(r, body, NULL, body->len);
    bm_buf_unref(body);
    resp_finish(r, false);
}

void bm_resp_end(bm_req_t *req)
{
    if (req->owned && !req->started && req->conn->st != CONN_CLOSED) {
        bm_log_limited(&req->conn->srv->log_lim, BM_LOG_ERROR,
                       "server: handler ended %s %s without an answer", req->head->method,
                       bm_req_target(req));
        resp_json_error(req, 500, "no answer");
        return;
    }
    resp_finish(req, false);
}

void bm_resp_abort(bm_req_t *req)
{
    if (req->owned && !req->started && req->conn->st != CONN_CLOSED) {
        resp_json_error(req, 502, "upstream failed");
        return;
    }
    resp_finish(req, true);
}

void bm_resp_send(bm_req_t *req, int status, const char *content_type, bm_buf_t *body,
                  const bm_hdrs_t *extra)
{
    size_t n = body ? body->len : 0;
    if (resp_start(req, status, extra, content_type, (int64_t)n) == 0 && n)
        resp_body(req, body, NULL, n);
    resp_finish(req, false);
}

void bm_resp_send_str(bm_req_t *req, const char *content_type, bm_str_t *s)
{
    bm_buf_t *b = bm_str_finish(s);
    if (!b) {
        bm_resp_error(req, 500, "out of memory");
        return;
    }
    bm_resp_send(req, 200, content_type, b, NULL);
    bm_buf_unref(b);
}

void bm_resp_error(bm_req_t *req, int status, const char *fmt, ...)
{
    if (req->started) {
        /* Too late for a status: the client sees a truncated answer instead. */
        bm_resp_abort(req);
        return;
    }
    bm_str_t s = BM_STR_INIT;
    va_list ap;
    va_start(ap, fmt);
    bm_str_vprintf(&s, fmt, ap);
    va_end(ap);
    const char *msg = s.oom ? "error" : bm_str_data(&s);
    resp_json_error(req, status < 200 || status > 599 ? 500 : status, msg);
    bm_str_dispose(&s);
}

size_t bm_resp_pending_bytes(const bm_req_t *req)
{
    return req->conn->pending;
}

size_t bm_resp_unsent_bytes(const bm_req_t *req)
{
    const conn_t *c = req->conn;
    size_t n = c->pending;
    uv_os_fd_t fd;
    int q = 0;
    if (c->st != CONN_CLOSED && uv_fileno((const uv_handle_t *)&c->tcp, &fd) == 0 &&
        ioctl(fd, SIOCOUTQ, &q) == 0 && q > 0)
        n += (size_t)q;
    return n;
}

bool bm_resp_writable(const bm_req_t *req)
{
    const conn_t *c = req->conn;
    return c->st == CONN_CLOSED || c->pending <= c->srv->opts.write_high_water;
}

void bm_resp_on_drain(bm_req_t *req, void (*cb)(bm_req_t *req, void *ud), void *ud)
{
    req->drain_cb = cb;
    req->drain_ud = ud;
}

bool bm_resp_started(const bm_req_t *req)
{
    return req->started;
}
