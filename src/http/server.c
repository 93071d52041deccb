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
 * A connection is freed when its handles are closed and no handler holds its request:
 * a reference count covers both, and temporary holds protect code that calls out.
 *
 * TLS (bm_server_set_tls) sits between the socket and everything above: bytes read go
 * into the connection's TLS session and come out as plaintext into the same input buffer
 * (tls_pump), and the output queue is encrypted just before it is written (tls_send), a
 * batch at a time so that a slow reader still holds its bytes in the queue, where the
 * high-water mark sees them. Parsing, handlers and responses cannot tell the difference.
 * The handshake must end, and the first request start, within header_timeout_ms of the
 * accept (the deadline of a fresh connection).
 */
#include "http/server.h"

#include <linux/sockios.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <time.h>

#include "base/clock.h"
#include "base/defaults.h"
#include "base/err.h"
#include "base/log.h"
#include "http/http1.h"
#include "http/tls.h"

#define IN_BUF_SIZE (16 * 1024)       /* input buffer; also the read-ahead bound while handling */
#define POOL_MAX 64                   /* spare input buffers kept by the server */
#define ACC_CAP 4096                  /* accumulator for heads, framing and small bodies */
#define STREAM_ACC_CAP 128            /* accumulator of a stream: chunk framing only */
#define SMALL_COPY 512                /* bodies up to this many bytes are copied, not referenced */
#define MAX_IOV 64                    /* buffers per write */
#define MAX_WRITE_BYTES (1024 * 1024) /* bytes per uv_write, so that progress is visible */
#define LINGER_MS 2000                /* reading after our FIN, so the client sees the answer */
#define BODY_PREALLOC (1024 * 1024)   /* Content-Length bodies up to this are sized at once */
#define TLS_BATCH (256 * 1024)        /* plaintext encrypted per write: the rest stays queued */
#define TLS_STAGE (16 * 1024)         /* small segments are joined into one record */
#define TLS_RBUF (17 * 1024)          /* ciphertext per read: a record of 16 KiB and its framing */

typedef struct conn conn_t;

typedef struct seg {
    bm_buf_t *b; /* one reference held */
    size_t off;
    size_t len;
} seg_t;

typedef enum {
    RESP_NONE,        /* not started */
    RESP_FIXED,       /* Content-Length */
    RESP_CHUNKED,     /* Transfer-Encoding: chunked */
    RESP_UNTIL_CLOSE, /* HTTP/1.0 stream: the end is the close */
    RESP_NOBODY,      /* 204, 304: no body whatever the handler says */
} resp_mode_t;

typedef enum {
    DL_NONE,
    DL_FRESH,  /* a new connection: its first byte must come within header_timeout */
    DL_IDLE,   /* keep-alive between requests */
    DL_HEAD,   /* receiving a head */
    DL_BODY,   /* receiving a body (max gap) */
    DL_SEND,   /* output queued and no handler: bytes must keep moving */
    DL_LINGER, /* after our FIN */
} deadline_kind_t;

struct bm_req {
    conn_t *conn;
    const bm_http1_head_t *head;
    char *target;     /* owned: a target set by bm_req_set_target, or NULL (the head's) */
    bm_hdrs_t *extra; /* owned: fields added to the response head (bm_req_add_resp_fields) */
    const char *path;
    size_t path_len;
    const char *query;
    size_t query_len;
    bm_buf_t *body;
    uint64_t start_us;
    void *data;
    void (*abort_cb)(bm_req_t *req, void *ud);
    void *abort_ud;
    void (*drain_cb)(bm_req_t *req, void *ud);
    void *drain_ud;
    resp_mode_t mode;
    uint64_t remaining; /* RESP_FIXED: body bytes still owed */
    bool owned;         /* dispatched and not ended yet */
    bool aborted;       /* the abort callback ran (or was due with none registered) */
    bool started;
    bool suppress_body; /* HEAD, 204, 304 */
};

struct conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    bm_server_t *srv;
    conn_t *prev, *next;             /* the server's open connections */
    conn_t *dirty_prev, *dirty_next; /* the server's list of connections to flush */
    bool dirty;
    int refs;
    int handles_open;
    bm_http1_t *parser;
    bm_req_t req;
    char peer[64];

    /* input */
    char *in; /* pool buffer of IN_BUF_SIZE, or NULL */
    size_t in_off, in_len;
    bool reading;
    bool alloc_direct; /* the last allocation pointed into the request body */
    bool peer_eof;

    /* output */
    seg_t *q;
    size_t qhead, qtail, qcap;
    bm_buf_t *acc; /* accumulator; one reference held */
    size_t acc_start;
    size_t pending; /* bytes queued or in flight */
    uv_write_t wreq;
    uv_shutdown_t sreq;
    size_t wbytes; /* bytes of the write in flight */
    bool writing;
    bool drain_armed;

    /* state */
    bool in_process;
    bool need_process; /* conn_process is due from the check handle */
    bool closing;      /* uv_close was called */
    bool close_after;  /* close once no request is owned and the output is written */
    bool finishing;    /* close_after is being carried out */
    bool shut;         /* uv_shutdown was issued */
    bool linger;
    bool broken;     /* an allocation failed mid-response: close from the loop */
    bool error_sent; /* the server answered an error itself: close after it */
    bool keep_alive;
    bool fresh; /* no request seen yet */
    uint64_t deadline;
    deadline_kind_t dl_kind;

    /* TLS, on a TLS listener only */
    bm_tls_conn_t *tls;
    bm_buf_t *tls_wbuf; /* ciphertext of the write in flight; one reference held */
    bool tls_pumping;   /* tls_pump is on the stack */
};

struct bm_server {
    uv_loop_t *loop;
    bm_server_opts_t opts;
    bm_http1_limits_t lim;
    bm_server_handler_fn handler;
    void *ud;

    uv_tcp_t listener;
    uv_timer_t grace;
    uv_check_t check;
    uv_idle_t idle;
    int handles_open;
    bool listening;
    bool listener_closing;
    bool listener_closed;
    bool freeing;
    int port;

    conn_t *conns;
    size_t nconns; /* open connections (in `conns`) */
    size_t nalloc; /* connection structs not yet freed */
    conn_t *dirty;

    char *pool[POOL_MAX];
    size_t npool;
    char discard[4096]; /* read target while lingering */

    bool shutting_down;
    bool done_pending;
    bool done_called;
    void (*done)(bm_server_t *srv, void *ud);
    void *done_ud;

    time_t date_sec;
    char date[64]; /* "Date: ...\r\n" */
    size_t date_len;
    bm_log_limit_t log_lim;

    bm_tls_ctx_t *tls;          /* one reference; NULL: plain HTTP */
    bm_log_limit_t tls_log_lim; /* handshake failures: scanners make many */
    char tls_rbuf[TLS_RBUF];    /* ciphertext read target: fed to the session at once */
};

static void conn_process(conn_t *c);
static void conn_flush(conn_t *c);
static void conn_close(conn_t *c);
static void conn_update_deadline(conn_t *c, bool progress);
static void conn_update_reading(conn_t *c);
static void srv_maybe_done(bm_server_t *srv);
static void dirty_remove(conn_t *c);
static void tls_pump(conn_t *c);

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
    o->write_high_water = 1024 * 1024;
}

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
    char tmp[24];
    size_t i = sizeof tmp;
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    return put(w, tmp + i, sizeof tmp - i);
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
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        /* letters, digits and '-' make up nearly every field name: decide those at once */
        if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')
            continue;
        if ((c >= '0' && c <= '9') || c == '-')
            continue;
        if (c <= 0x20 || c >= 0x7f || strchr("\"(),/:;<=>?@[\\]{}", c))
            return false;
    }
    return true;
}

static bool is_safe_value(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] == '\r' || s[i] == '\n' || s[i] == '\0')
            return false;
    return true;
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
static void conn_release_input(conn_t *c)
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

static void conn_hold(conn_t *c)
{
    c->refs++;
}

static void conn_unref(conn_t *c)
{
    bm_assert(c->refs > 0);
    if (--c->refs == 0)
        conn_free(c);
}

static void on_conn_handle_closed(uv_handle_t *h)
{
    conn_t *c = h->data;
    if (--c->handles_open == 0)
        conn_unref(c);
}

/* The idle handle only keeps the loop from blocking until the check handle flushed. */
static void on_idle(uv_idle_t *h)
{
    (void)h;
}

static void dirty_remove(conn_t *c)
{
    if (!c->dirty)
        return;
    bm_server_t *srv = c->srv;
    if (c->dirty_prev)
        c->dirty_prev->dirty_next = c->dirty_next;
    else
        srv->dirty = c->dirty_next;
    if (c->dirty_next)
        c->dirty_next->dirty_prev = c->dirty_prev;
    c->dirty_prev = c->dirty_next = NULL;
    c->dirty = false;
}

static void dirty_add(conn_t *c)
{
    if (c->dirty)
        return;
    bm_server_t *srv = c->srv;
    c->dirty = true;
    c->dirty_prev = NULL;
    c->dirty_next = srv->dirty;
    if (srv->dirty)
        srv->dirty->dirty_prev = c;
    srv->dirty = c;
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
            size_t ncap = c->qcap ? c->qcap * 2 : 8;
            seg_t *nq = realloc(c->q, ncap * sizeof *nq);
            if (!nq)
                return false;
            c->q = nq;
            c->qcap = ncap;
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
static char *acc_reserve(conn_t *c, size_t n)
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

static void acc_commit(conn_t *c, size_t n)
{
    c->acc->len += n;
    c->pending += n;
}

static bool queue_copy(conn_t *c, const void *p, size_t n)
{
    if (n == 0)
        return true;
    char *w = acc_reserve(c, n);
    if (!w)
        return false;
    memcpy(w, p, n);
    acc_commit(c, n);
    return true;
}

/* Queues b[off..off+n): copied when small, else referenced. */
static bool queue_buf(conn_t *c, bm_buf_t *b, size_t off, size_t n)
{
    if (n == 0)
        return true;
    if (n <= SMALL_COPY && !conn_streaming(c))
        return queue_copy(c, b->data + off, n);
    if (!acc_seal(c) || !q_push(c, b, off, n))
        return false;
    c->pending += n;
    return true;
}

/* Drops n written bytes from the front of the queue. */
static void q_consume(conn_t *c, size_t n)
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
static void conn_schedule(conn_t *c)
{
    if (c->closing)
        return;
    c->need_process = true;
    dirty_add(c);
}

/* Marks the connection for a flush at the end of this loop iteration. */
static void conn_mark_dirty(conn_t *c)
{
    if (c->in_process || c->closing)
        return; /* conn_process flushes when it returns */
    dirty_add(c);
}

static void arm_drain(conn_t *c)
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
    if (r->owned && r->drain_cb && !c->closing)
        r->drain_cb(r, r->drain_ud);
}

static void on_shutdown(uv_shutdown_t *sr, int status)
{
    conn_t *c = sr->data;
    if (!c->closing) {
        if (status < 0) {
            conn_close(c);
        } else {
            /* Our FIN is out; read until the client's, so that unread input cannot turn our
             * close into a reset that destroys the answer on its way. */
            c->linger = true;
            c->deadline = 0;
            c->dl_kind = DL_NONE;
            conn_update_deadline(c, false);
            conn_update_reading(c);
        }
    }
    conn_unref(c);
}

/* close_after: once the queue is empty, shut the write side down, then linger. */
static void conn_maybe_shutdown(conn_t *c)
{
    if (!c->finishing || c->shut || c->closing || c->pending > 0 || c->writing)
        return;
    if (c->peer_eof) {
        conn_close(c); /* the client's FIN came first: nothing left to linger for */
        return;
    }
    if (c->tls) {
        /* A TLS client knows the answer is complete from the close_notify before the FIN. */
        bm_tls_conn_close_notify(c->tls);
        if (bm_tls_conn_out_len(c->tls) > 0) {
            conn_flush(c); /* comes back here once it is written */
            return;
        }
    }
    c->shut = true;
    c->sreq.data = c;
    int rc = uv_shutdown(&c->sreq, (uv_stream_t *)&c->tcp, on_shutdown);
    if (rc < 0) {
        conn_close(c);
        return;
    }
    conn_hold(c);
}

static void on_write(uv_write_t *w, int status)
{
    conn_t *c = w->data;
    c->writing = false;
    q_consume(c, c->wbytes);
    c->wbytes = 0;
    bm_buf_unref(c->tls_wbuf);
    c->tls_wbuf = NULL;
    if (c->closing)
        return;
    if (status < 0) {
        conn_close(c);
        return;
    }
    conn_hold(c);
    conn_flush(c);
    if (!c->closing) {
        conn_update_deadline(c, true);
        /* Pipelined requests wait while the queue is above high water. */
        if (!c->req.owned && !c->finishing)
            conn_process(c);
    }
    conn_unref(c);
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
            conn_close(c);
            return false;
        }
        q_consume(c, (size_t)rc);
        if ((size_t)rc < bytes)
            break; /* the kernel is full: hand the rest to libuv */
    }
    if (c->qhead < c->qtail) {
        size_t n = q_iov(c, iov, &bytes);
        c->wreq.data = c;
        int rc = uv_write(&c->wreq, (uv_stream_t *)&c->tcp, iov, (unsigned)n, on_write);
        if (rc < 0) {
            conn_close(c);
            return false;
        }
        c->writing = true;
        c->wbytes = bytes;
    }
    return true;
}

/* Encrypts up to TLS_BATCH bytes from the front of the queue; small segments are joined
 * so that a head and a small body make one record. False when the session failed. */
static bool tls_encrypt(conn_t *c)
{
    char stage[TLS_STAGE];
    size_t staged = 0, done = 0;
    while (c->qhead < c->qtail && done < TLS_BATCH) {
        seg_t *s = &c->q[c->qhead];
        size_t k = s->len < TLS_BATCH - done ? s->len : TLS_BATCH - done;
        const char *p = s->b->data + s->off;
        if (k <= TLS_STAGE - staged) {
            memcpy(stage + staged, p, k);
            staged += k;
        } else {
            if ((staged && bm_tls_conn_write(c->tls, stage, staged) != 0) ||
                bm_tls_conn_write(c->tls, p, k) != 0)
                return false;
            staged = 0;
        }
        q_consume(c, k);
        done += k;
    }
    return !staged || bm_tls_conn_write(c->tls, stage, staged) == 0;
}

/*
 * Writes what the TLS session has for the peer, encrypting more of the queue only once the
 * previous batch is out. False when the connection closed.
 */
static bool tls_send(conn_t *c)
{
    for (;;) {
        if (bm_tls_conn_out_len(c->tls) == 0 && c->qhead < c->qtail && bm_tls_conn_ready(c->tls) &&
            !tls_encrypt(c)) {
            bm_log_limited(&c->srv->tls_log_lim, BM_LOG_WARN, "server: TLS to %s failed: %s",
                           c->peer, bm_tls_conn_error(c->tls));
            conn_close(c);
            return false;
        }
        size_t n = bm_tls_conn_out_len(c->tls);
        if (n == 0)
            return true;
        bm_buf_t *b = bm_buf_new(n);
        if (!b) {
            conn_close(c);
            return false;
        }
        b->len = bm_tls_conn_take(c->tls, b->data, n);
        uv_buf_t one = uv_buf_init(b->data, (unsigned)b->len);
        int rc = uv_try_write((uv_stream_t *)&c->tcp, &one, 1);
        if (rc == UV_EAGAIN || rc == UV_ENOSYS)
            rc = 0;
        if (rc >= 0 && (size_t)rc < b->len) {
            one = uv_buf_init(b->data + rc, (unsigned)(b->len - (size_t)rc));
            c->wreq.data = c;
            rc = uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &one, 1, on_write);
            if (rc == 0) {
                c->tls_wbuf = b; /* the plaintext left the queue when it was encrypted */
                c->writing = true;
                c->wbytes = 0;
                return true;
            }
        }
        bm_buf_unref(b);
        if (rc < 0) {
            conn_close(c);
            return false;
        }
    }
}

/* Writes what is queued, in plain or through the TLS session. */
static void conn_flush(conn_t *c)
{
    if (c->closing || c->writing)
        return;
    dirty_remove(c);
    if (!acc_seal(c)) {
        conn_close(c);
        return;
    }
    if (!(c->tls ? tls_send(c) : plain_send(c)))
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
    if (!c->closing)
        conn_maybe_shutdown(c);
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
            if (f->name_len == 4 && strncasecmp(f->name, "date", 4) == 0)
                have_date = true;
        }
    }
    for (size_t i = 0; h->extra && i < h->extra->n; i++)
        need += h->extra->items[i].name_len + h->extra->items[i].value_len + 4;
    char *w0 = acc_reserve(c, need);
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
    acc_commit(c, (size_t)(w - w0));
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
static void conn_send_error(conn_t *c, int status, const char *msg)
{
    if (c->closing)
        return;
    c->keep_alive = false;
    c->close_after = true;
    c->error_sent = true;
    bm_buf_t *body = error_body(status, msg);
    if (!body) {
        conn_close(c);
        return;
    }
    head_spec_t h = {.status = status,
                     .content_type = "application/json",
                     .mode = RESP_FIXED,
                     .content_length = body->len,
                     .keep_alive = false};
    if (!queue_head(c, &h) || !queue_buf(c, body, 0, body->len)) {
        bm_buf_unref(body);
        conn_close(c);
        return;
    }
    bm_buf_unref(body);
    conn_mark_dirty(c);
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
static void conn_close(conn_t *c)
{
    if (c->closing)
        return;
    bm_server_t *srv = c->srv;
    c->closing = true;
    conn_hold(c);
    dirty_remove(c);
    if (c->prev)
        c->prev->next = c->next;
    else
        srv->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
    srv->nconns--;
    c->deadline = 0;
    uv_close((uv_handle_t *)&c->tcp, on_conn_handle_closed);
    uv_close((uv_handle_t *)&c->timer, on_conn_handle_closed);
    if (c->in) {
        pool_put(srv, c->in);
        c->in = NULL;
        c->in_off = c->in_len = 0;
    }
    conn_fire_abort(c);
    conn_unref(c);
}

static void on_conn_timer(uv_timer_t *t);

static void set_deadline(conn_t *c, deadline_kind_t kind, uint64_t ms)
{
    uint64_t now = uv_now(c->srv->loop);
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
    if (c->closing)
        return;
    const bm_server_opts_t *o = &c->srv->opts;
    bm_http1_phase_t ph = bm_http1_phase(c->parser);
    if (c->req.owned) {
        clear_deadline(c);
    } else if (c->linger) {
        if (c->dl_kind != DL_LINGER)
            set_deadline(c, DL_LINGER, LINGER_MS);
    } else if (c->pending > 0 && (c->finishing || ph == BM_HTTP1_IDLE)) {
        if (c->dl_kind != DL_SEND || progress)
            set_deadline(c, DL_SEND, o->idle_timeout_ms);
    } else if (ph == BM_HTTP1_HEAD) {
        if (c->dl_kind != DL_HEAD)
            set_deadline(c, DL_HEAD, o->header_timeout_ms);
    } else if (ph == BM_HTTP1_BODY) {
        if (c->dl_kind != DL_BODY || !progress)
            set_deadline(c, DL_BODY, o->body_timeout_ms);
    } else if (ph == BM_HTTP1_IDLE && !c->finishing) {
        if (c->fresh) {
            if (c->dl_kind != DL_FRESH)
                set_deadline(c, DL_FRESH, o->header_timeout_ms);
        } else if (c->dl_kind != DL_IDLE) {
            set_deadline(c, DL_IDLE, o->idle_timeout_ms);
        }
    }
}

static void on_conn_timer(uv_timer_t *t)
{
    conn_t *c = t->data;
    if (c->closing || c->deadline == 0)
        return;
    uint64_t now = uv_now(c->srv->loop);
    if (now < c->deadline) {
        uv_timer_start(&c->timer, on_conn_timer, c->deadline - now, 0);
        return;
    }
    deadline_kind_t kind = c->dl_kind;
    clear_deadline(c);
    switch (kind) {
    case DL_HEAD:
    case DL_BODY:
        /* Nothing of an answer to this request was sent: say why we close. */
        conn_hold(c);
        conn_send_error(c, 408,
                        kind == DL_HEAD ? "request head not received in time"
                                        : "request body not received in time");
        conn_process(c);
        conn_unref(c);
        break;
    case DL_SEND:
        bm_log_limited(&c->srv->log_lim, BM_LOG_INFO,
                       "server: closing %s: response not read for %u ms", c->peer,
                       c->srv->opts.idle_timeout_ms);
        conn_close(c);
        break;
    default:
        if (kind == DL_FRESH && c->tls && !bm_tls_conn_ready(c->tls))
            bm_log_limited(&c->srv->tls_log_lim, BM_LOG_WARN,
                           "server: TLS handshake with %s not done within %u ms", c->peer,
                           c->srv->opts.header_timeout_ms);
        conn_close(c);
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
static bool input_room(const conn_t *c)
{
    return !c->in || c->in_off > 0 || c->in_len < IN_BUF_SIZE;
}

/* Where the next input bytes go: straight into the request body, or the input buffer. */
static void input_alloc(conn_t *c, uv_buf_t *buf)
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
    if (c->linger)
        *buf = uv_buf_init(c->srv->discard, sizeof c->srv->discard);
    else if (c->tls) /* libuv calls on_read before it allocates again: one buffer serves all */
        *buf = uv_buf_init(c->srv->tls_rbuf, sizeof c->srv->tls_rbuf);
    else
        input_alloc(c, buf);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

/* Reads while there is room; stops when the buffer is full of unparsed input. */
static void conn_update_reading(conn_t *c)
{
    if (c->closing)
        return;
    bool want;
    if (c->linger)
        want = true;
    else if (c->peer_eof || c->finishing)
        want = false;
    else
        want = input_room(c);
    if (want && !c->reading) {
        if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0)
            c->reading = true;
    } else if (!want && c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
    }
}

/* Takes nread bytes (or the end, or an error) that arrived in `buf` (input_alloc's). */
static void conn_input(conn_t *c, ssize_t nread, const uv_buf_t *buf, bool direct)
{
    if (nread == 0) {
        conn_release_input(c);
        return;
    }
    if (c->linger) {
        if (nread < 0)
            conn_close(c);
        return;
    }
    if (nread < 0) {
        conn_release_input(c);
        if (nread != UV_EOF || c->req.owned) {
            /* A reset, or a client that left while its request was being handled. */
            conn_close(c);
            return;
        }
        /* A half close: answer what is buffered, then close. */
        c->peer_eof = true;
        conn_hold(c);
        conn_update_reading(c);
        conn_process(c);
        conn_unref(c);
        return;
    }
    conn_hold(c);
    if (direct) {
        size_t used;
        bm_http1_feed(c->parser, buf->base, (size_t)nread, &used);
        /* A body of known length: http-parser takes every byte; the outcome (DONE or
         * ERROR) is left in the parser's phase for conn_process. */
    } else {
        c->in_len += (size_t)nread;
    }
    conn_process(c);
    conn_unref(c);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    conn_t *c = s->data;
    bool direct = c->alloc_direct;
    c->alloc_direct = false;
    if (c->closing)
        return;
    if (c->tls && nread > 0 && !c->linger) {
        if (bm_tls_conn_feed(c->tls, buf->base, (size_t)nread) != 0)
            conn_close(c);
        else
            tls_pump(c);
        return;
    }
    conn_input(c, nread, buf, direct);
}

/* A handshake or record failed: the client learns why from the alert, we from the log. */
static void tls_fail(conn_t *c)
{
    bool ready = bm_tls_conn_ready(c->tls);
    bm_log_limited(&c->srv->tls_log_lim, BM_LOG_WARN, "server: TLS %s %s failed: %s",
                   ready ? "session with" : "handshake with", c->peer, bm_tls_conn_error(c->tls));
    char alert[256];
    size_t n = bm_tls_conn_take(c->tls, alert, sizeof alert);
    if (n > 0) {
        uv_buf_t one = uv_buf_init(alert, (unsigned)n);
        uv_try_write((uv_stream_t *)&c->tcp, &one, 1); /* best effort: we close anyway */
    }
    conn_close(c);
}

/*
 * Decrypts what the TLS session holds into the input while there is room for it, each
 * piece taken as a plain read would be, then sends what the session has for the peer
 * (handshake messages, tickets). What does not fit waits in the session: conn_process
 * pumps again once the input was consumed.
 */
static void tls_pump(conn_t *c)
{
    if (c->tls_pumping || c->closing)
        return;
    c->tls_pumping = true;
    conn_hold(c);
    while (!c->closing && !c->linger && !c->peer_eof && input_room(c)) {
        uv_buf_t buf;
        c->alloc_direct = false;
        input_alloc(c, &buf);
        bool direct = c->alloc_direct;
        c->alloc_direct = false;
        if (!buf.base || buf.len == 0) {
            conn_close(c);
            break;
        }
        ssize_t n = bm_tls_conn_read(c->tls, buf.base, buf.len);
        if (n > 0) {
            conn_input(c, n, &buf, direct);
        } else if (n == 0) {
            conn_release_input(c); /* more ciphertext needed */
            break;
        } else if (n == BM_ECLOSED) {
            conn_input(c, UV_EOF, &buf, false); /* close_notify: the client's end */
            break;
        } else {
            tls_fail(c);
            break;
        }
    }
    c->tls_pumping = false;
    if (!c->closing && bm_tls_conn_out_len(c->tls) > 0)
        conn_flush(c);
    conn_unref(c);
}

/* ---- the parser's events --------------------------------------------------------- */

static int on_head(void *ud, const bm_http1_head_t *h)
{
    conn_t *c = ud;
    bm_req_t *r = &c->req;
    r->start_us = bm_clock_mono_us();
    if (h->content_length > 0) {
        size_t first =
            h->content_length > BODY_PREALLOC ? BODY_PREALLOC : (size_t)h->content_length;
        if (!body_reserve(c, first, (size_t)h->content_length))
            return 503;
    }
    if (h->expect_continue) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        if (!queue_copy(c, cont, sizeof cont - 1))
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

static void split_target(bm_req_t *r)
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
    split_target(r);
    c->fresh = false;
    c->keep_alive = h->keep_alive && !srv->shutting_down && !c->peer_eof;
    c->drain_armed = c->pending > srv->opts.write_high_water;
    clear_deadline(c);
    conn_hold(c); /* the request's reference, dropped when it ends */
    srv->handler(r, srv->ud);
}

/*
 * Parses buffered input and hands complete requests to the handler, one at a time, until
 * input runs out, a handler keeps its request, the output queue is over high water, or
 * the connection is to be closed. Then flushes the output in one go.
 */
static void process_input(conn_t *c)
{
    while (!c->closing && !c->req.owned) {
        bm_http1_phase_t ph = bm_http1_phase(c->parser);
        if (ph == BM_HTTP1_COMPLETE) {
            dispatch(c);
            continue;
        }
        if (ph == BM_HTTP1_FAILED && !c->error_sent) {
            conn_send_error(c, bm_http1_error_status(c->parser), bm_http1_error_message(c->parser));
            continue;
        }
        /* close_after waits for a request being received (graceful shutdown lets it
         * finish), unless the server already answered it with an error. */
        if (c->close_after && (ph == BM_HTTP1_IDLE || c->error_sent || c->broken)) {
            c->finishing = true;
            break;
        }
        if (c->pending > c->srv->opts.write_high_water)
            break; /* resumed once the queue drained */
        if (c->in_off == c->in_len) {
            if (c->peer_eof) {
                /* Half-closed: nothing more will come. A partial request is dropped. */
                if (ph == BM_HTTP1_IDLE)
                    c->close_after = true;
                else
                    conn_close(c);
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
    if (c->in_process || c->closing)
        return;
    conn_hold(c);
    for (;;) {
        c->in_process = true;
        process_input(c);
        c->in_process = false; /* callbacks run by the flush may queue more */
        conn_flush(c);
        /* uv_try_write may have drained the queue that stopped the loop. */
        if (c->closing || c->req.owned || c->finishing || c->in_off == c->in_len ||
            c->pending > c->srv->opts.write_high_water)
            break;
    }
    if (!c->closing) {
        conn_release_input(c);
        conn_update_deadline(c, false);
        conn_update_reading(c);
    }
    if (c->tls && !c->closing && bm_tls_conn_has_input(c->tls))
        tls_pump(c); /* plaintext that did not fit before */
    conn_unref(c);
}

/* ---- accepting --------------------------------------------------------------------- */

static void on_connection(uv_stream_t *ls, int status)
{
    bm_server_t *srv = ls->data;
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
    bool refuse = rc < 0 || srv->shutting_down || srv->nconns >= srv->opts.max_connections;
    if (!refuse) {
        c->parser = bm_http1_new(&srv->lim, &parser_cbs, c);
        refuse = c->parser == NULL;
    }
    if (!refuse && srv->tls) {
        c->tls = bm_tls_conn_new(srv->tls); /* the context of this moment, kept to the end */
        refuse = c->tls == NULL;
    }
    if (refuse) {
        if (rc == 0 && srv->nconns >= srv->opts.max_connections)
            bm_log_limited(&srv->log_lim, BM_LOG_WARN,
                           "server: %zu connections open, refusing another", srv->nconns);
        c->closing = true;
        uv_close((uv_handle_t *)&c->tcp, on_conn_handle_closed);
        uv_close((uv_handle_t *)&c->timer, on_conn_handle_closed);
        return;
    }
    c->req.conn = c;
    uv_tcp_nodelay(&c->tcp, 1);
    struct sockaddr_storage ss;
    int sl = sizeof ss;
    strcpy(c->peer, "unknown");
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET6)
            uv_ip6_name((struct sockaddr_in6 *)&ss, c->peer, sizeof c->peer);
        else if (ss.ss_family == AF_INET)
            uv_ip4_name((struct sockaddr_in *)&ss, c->peer, sizeof c->peer);
    }
    c->next = srv->conns;
    if (srv->conns)
        srv->conns->prev = c;
    srv->conns = c;
    srv->nconns++;
    conn_update_deadline(c, false);
    conn_update_reading(c);
    if (!c->reading)
        conn_close(c);
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
    split_target(req);
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
    return req->conn->closing;
}

void bm_req_on_abort(bm_req_t *req, void (*cb)(bm_req_t *req, void *ud), void *ud)
{
    conn_t *c = req->conn;
    req->abort_cb = cb;
    req->abort_ud = ud;
    /* Registered after the client left: run it from the loop, never from inside this call. */
    if (cb && c->closing && req->owned && !req->aborted)
        dirty_add(c);
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
    c->close_after = true;
    c->keep_alive = false;
    c->broken = true;
    dirty_add(c);
}

static int resp_start(bm_req_t *r, int status, const bm_hdrs_t *hdrs, const char *ctype,
                      int64_t content_length)
{
    conn_t *c = r->conn;
    if (!r->owned || r->started || status < 200 || status > 599)
        return BM_EINVAL;
    r->started = true;
    if (c->closing)
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
    arm_drain(c);
    conn_mark_dirty(c);
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
    if (c->closing || c->broken)
        return BM_ECLOSED;
    if (n == 0 || r->suppress_body)
        return 0;
    int rc = 0;
    bool ok = true;
    switch (r->mode) {
    case RESP_FIXED:
        if (n > r->remaining) {
            bm_log_limited(&c->srv->log_lim, BM_LOG_WARN,
                           "server: response body longer than its Content-Length; cut");
            n = (size_t)r->remaining;
            rc = BM_ETOOBIG;
        }
        r->remaining -= n;
        ok = b ? queue_buf(c, b, 0, n) : queue_copy(c, p, n);
        break;
    case RESP_CHUNKED: {
        char hdr[24];
        char *w = put_hex(hdr, n);
        w = PUT_LIT(w, "\r\n");
        ok = queue_copy(c, hdr, (size_t)(w - hdr)) &&
             (b ? queue_buf(c, b, 0, n) : queue_copy(c, p, n)) && queue_copy(c, "\r\n", 2);
        break;
    }
    case RESP_UNTIL_CLOSE:
        ok = b ? queue_buf(c, b, 0, n) : queue_copy(c, p, n);
        break;
    default:
        break;
    }
    if (!ok) {
        conn_break(c);
        return BM_ENOMEM;
    }
    arm_drain(c);
    conn_mark_dirty(c);
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
    bm_http1_next(c->parser);
    conn_unref(c);
}

static void resp_finish(bm_req_t *r, bool abort)
{
    conn_t *c = r->conn;
    if (!r->owned) {
        bm_log(BM_LOG_ERROR, "server: a request was ended twice");
        return;
    }
    conn_hold(c);
    if (!c->closing) {
        if (abort) {
            c->keep_alive = false;
        } else if (r->mode == RESP_FIXED && r->remaining > 0 && !r->suppress_body) {
            c->keep_alive = false; /* a truncated body: only the close can say so */
        } else if (r->mode == RESP_CHUNKED && !r->suppress_body) {
            if (!queue_copy(c, "0\r\n\r\n", 5))
                conn_break(c);
        } else if (r->mode == RESP_UNTIL_CLOSE && !r->suppress_body) {
            c->keep_alive = false;
        }
        if (!c->keep_alive || c->srv->shutting_down || c->broken)
            c->close_after = true;
    }
    req_release(c);
    if (!c->closing && !c->in_process)
        conn_schedule(c); /* the flush, the next pipelined request, or the close */
    conn_unref(c);
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
    if (req->owned && !req->started && !req->conn->closing) {
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
    if (req->owned && !req->started && !req->conn->closing) {
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
    if (!c->closing && uv_fileno((const uv_handle_t *)&c->tcp, &fd) == 0 &&
        ioctl(fd, SIOCOUTQ, &q) == 0 && q > 0)
        n += (size_t)q;
    return n;
}

bool bm_resp_writable(const bm_req_t *req)
{
    const conn_t *c = req->conn;
    return c->closing || c->pending <= c->srv->opts.write_high_water;
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

/* ---- the server ---------------------------------------------------------------------- */

static void srv_free_now(bm_server_t *srv)
{
    bm_tls_ctx_unref(srv->tls);
    for (size_t i = 0; i < srv->npool; i++)
        free(srv->pool[i]);
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
    while (srv->dirty) {
        conn_t *c = srv->dirty;
        dirty_remove(c);
        conn_hold(c);
        if (c->closing) {
            conn_fire_abort(c);
        } else if (c->broken) {
            conn_close(c);
        } else if (c->need_process) {
            c->need_process = false;
            conn_process(c);
        } else {
            conn_flush(c);
        }
        conn_unref(c);
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
    if (!srv->dirty)
        uv_idle_stop(&srv->idle);
}

bm_server_t *bm_server_new(uv_loop_t *loop, const bm_server_opts_t *opts,
                           bm_server_handler_fn handler, void *ud)
{
    bm_server_t *srv = calloc(1, sizeof *srv);
    if (!srv)
        return NULL;
    bm_server_opts_t def;
    bm_server_opts_default(&def);
    srv->opts = opts ? *opts : def;
    /* A zero means "not set": take the default rather than a limit of nothing. */
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
    if (!srv->opts.write_high_water)
        srv->opts.write_high_water = def.write_high_water;
    srv->lim = (bm_http1_limits_t){srv->opts.max_target_bytes, srv->opts.max_header_bytes,
                                   srv->opts.max_body_bytes};
    srv->loop = loop;
    srv->handler = handler;
    srv->ud = ud;
    srv->port = -1;
    srv->log_lim.window_ms = 10000;
    srv->log_lim.burst = 5;
    srv->tls_log_lim.window_ms = 10000;
    srv->tls_log_lim.burst = 5;

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
    int rc = uv_tcp_bind(&srv->listener, (struct sockaddr *)&ss, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&srv->listener, 511, on_connection);
    if (rc < 0) {
        bm_log(BM_LOG_ERROR, "server: cannot listen on %s:%d: %s", host, port, uv_strerror(rc));
        return bm_err_from_uv(rc);
    }
    int sl = sizeof ss;
    if (uv_tcp_getsockname(&srv->listener, (struct sockaddr *)&ss, &sl) == 0)
        srv->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                   : ((struct sockaddr_in *)&ss)->sin_port);
    srv->listening = true;
    bm_log(BM_LOG_INFO, "server: listening on %s port %d%s", host, srv->port,
           srv->tls ? " (TLS)" : "");
    return 0;
}

void bm_server_set_tls(bm_server_t *srv, bm_tls_ctx_t *ctx)
{
    bm_tls_ctx_t *old = srv->tls;
    srv->tls = ctx ? bm_tls_ctx_ref(ctx) : NULL;
    bm_tls_ctx_unref(old);
}

int bm_server_port(const bm_server_t *srv)
{
    return srv->listening ? srv->port : -1;
}

size_t bm_server_connection_count(const bm_server_t *srv)
{
    return srv->nconns;
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
    while (srv->conns)
        conn_close(srv->conns);
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
    conn_t *next;
    for (conn_t *c = srv->conns; c; c = next) {
        next = c->next;
        c->keep_alive = false;
        if (c->req.owned || c->finishing || c->linger)
            continue; /* closes after its answer, or is closing already */
        if (bm_http1_phase(c->parser) == BM_HTTP1_IDLE && c->pending == 0) {
            conn_close(c); /* idle */
            continue;
        }
        c->close_after = true;
        conn_schedule(c);
    }
    uv_timer_start(&srv->grace, on_grace, grace_ms, 0);
    srv_maybe_done(srv);
}

void bm_server_free(bm_server_t *srv)
{
    if (!srv || srv->freeing)
        return;
    if (srv->conns)
        bm_log(BM_LOG_ERROR, "server: freed with %zu connections open", srv->nconns);
    srv->freeing = true;
    while (srv->conns)
        conn_close(srv->conns);
    if (!srv->listener_closing) {
        srv->listener_closing = true;
        uv_close((uv_handle_t *)&srv->listener, on_srv_handle_closed);
    }
    uv_close((uv_handle_t *)&srv->grace, on_srv_handle_closed);
    uv_close((uv_handle_t *)&srv->check, on_srv_handle_closed);
    uv_close((uv_handle_t *)&srv->idle, on_srv_handle_closed);
}
