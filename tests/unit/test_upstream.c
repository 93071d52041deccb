/* SPDX-License-Identifier: MIT */
/*
 * test_upstream: the libcurl-on-libuv client against a scripted HTTP/1.1 server that lives
 * in this file, on 127.0.0.1 port 0 and on the same loop. The server records every request
 * (method, target, header fields, body, connection) and answers according to the target's
 * path, so each test states its scenario in the URL it asks for:
 *
 *   /hello          200, small JSON body and a few header fields
 *   /echo           200, echoes the request body and its Content-Type
 *   /ssz            200, a binary body with NUL bytes and the consensus header fields
 *   /silent         never answers
 *   /partial        announces 1000 bytes, sends 100, closes
 *   /stream?n=N&size=S&ms=M  chunked body: N chunks (0: forever) of S pattern bytes, M ms apart
 *   /stall          chunked head and one chunk, then silence
 *   /big?n=N&chunked=C       N pattern bytes, with Content-Length or chunked
 *   /early          a 103 interim head, then the final 200
 *   /head           200 with Content-Length: 10 and no body (for HEAD)
 *   /bye            200, then the server closes the (keep-alive) connection
 *   anything else   200, the target as body
 * A request that does not start with a capital letter (a TLS ClientHello) gets a raw 400.
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
#include "http/upstream.h"

/* ---- loop helpers ------------------------------------------------------------------------- */

#include "loop_guard.h"

static void free_handle(uv_handle_t *h)
{
    free(h->data == NULL ? (void *)h : h->data);
}

typedef struct later {
    uv_timer_t t;
    void (*fn)(void *);
    void *arg;
} later_t;

static void on_later(uv_timer_t *t)
{
    later_t *l = t->data;
    l->fn(l->arg);
    uv_close((uv_handle_t *)&l->t, free_handle);
}

/* Calls fn(arg) once after `ms`. */
static void after(uv_loop_t *loop, uint64_t ms, void (*fn)(void *), void *arg)
{
    later_t *l = calloc(1, sizeof *l);
    assert_non_null(l);
    l->fn = fn;
    l->arg = arg;
    uv_timer_init(loop, &l->t);
    l->t.data = l;
    uv_timer_start(&l->t, on_later, ms, 0);
}

static unsigned char pat(size_t i)
{
    return (unsigned char)(i * 31u + 7u);
}

/* ---- the scripted server ------------------------------------------------------------------- */

#define MAX_REQS 256

typedef struct sreq {
    char method[16];
    char target[512];
    bm_hdrs_t h;
    bm_str_t body;
    int conn_id;
} sreq_t;

typedef struct srv srv_t;

typedef struct sconn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    srv_t *srv;
    int id;
    int handles; /* handles not yet closed; freed at 0 */
    bool closed;
    char *in;
    size_t in_len, in_cap;
    /* stream script */
    int left; /* chunks still to send; -1 forever */
    size_t size;
    uint64_t ms;
    size_t off;
    struct sconn *prev, *next;
} sconn_t;

struct srv {
    uv_loop_t *loop;
    uv_tcp_t listener;
    int port;
    int accepts;
    int eofs; /* connections the client closed */
    sreq_t reqs[MAX_REQS];
    int nreqs;
    sconn_t *conns;
};

static void conn_closed(uv_handle_t *h)
{
    sconn_t *c = h->data;
    if (--c->handles == 0) {
        free(c->in);
        free(c);
    }
}

static void sconn_close(sconn_t *c)
{
    if (c->closed)
        return;
    c->closed = true;
    srv_t *s = c->srv;
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    uv_close((uv_handle_t *)&c->tcp, conn_closed);
    uv_close((uv_handle_t *)&c->timer, conn_closed);
}

typedef struct wreq {
    uv_write_t w;
    char data[];
} wreq_t;

static void on_written(uv_write_t *w, int status)
{
    (void)status;
    free(w->data);
}

static void sconn_write(sconn_t *c, const void *p, size_t n)
{
    if (c->closed || n == 0)
        return;
    wreq_t *w = malloc(sizeof *w + n);
    assert_non_null(w);
    memcpy(w->data, p, n);
    w->w.data = w;
    uv_buf_t b = uv_buf_init(w->data, (unsigned)n);
    if (uv_write(&w->w, (uv_stream_t *)&c->tcp, &b, 1, on_written) != 0)
        free(w);
}

static void sconn_printf(sconn_t *c, const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    assert_true(n > 0 && (size_t)n < sizeof buf);
    sconn_write(c, buf, (size_t)n);
}

static void on_shutdown(uv_shutdown_t *r, int status)
{
    (void)status;
    sconn_close(r->data);
    free(r);
}

/* Closes after everything written so far has gone out. */
static void sconn_end(sconn_t *c)
{
    if (c->closed)
        return;
    uv_shutdown_t *r = malloc(sizeof *r);
    assert_non_null(r);
    r->data = c;
    if (uv_shutdown(r, (uv_stream_t *)&c->tcp, on_shutdown) != 0) {
        free(r);
        sconn_close(c);
    }
}

static void send_chunk(sconn_t *c)
{
    size_t n = c->size;
    char *b = malloc(n + 32);
    assert_non_null(b);
    int h = snprintf(b, 32, "%zx\r\n", n);
    for (size_t i = 0; i < n; i++)
        b[h + i] = (char)pat(c->off + i);
    c->off += n;
    memcpy(b + h + n, "\r\n", 2);
    sconn_write(c, b, (size_t)h + n + 2);
    free(b);
}

static void on_stream_tick(uv_timer_t *t)
{
    sconn_t *c = t->data;
    send_chunk(c);
    if (c->left > 0 && --c->left == 0) {
        uv_timer_stop(t);
        sconn_printf(c, "0\r\nX-Trailer: t\r\n\r\n"); /* trailers are not head fields */
    }
}

static void respond(sconn_t *c, const char *head_fields, const void *body, size_t n)
{
    sconn_printf(c, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n%s\r\n", n, head_fields);
    sconn_write(c, body, n);
}

static const unsigned char ssz_reply[] = {0x00, 0x01, 0x00, 0xff, 0x00, 0x00, 0x7f, 0x80, 0x00};

static void handle(srv_t *s, sconn_t *c, sreq_t *r)
{
    (void)s;
    const char *t = r->target;
    if (strcmp(t, "/hello") == 0) {
        static const char body[] = "{\"data\":{\"version\":\"test/1.0\"}}";
        respond(c, "Content-Type: application/json\r\nX-Test: one\r\nX-Test: two\r\n", body,
                sizeof body - 1);
    } else if (strcmp(t, "/echo") == 0) {
        const char *ct = bm_hdrs_get(&r->h, "Content-Type");
        char fields[256];
        snprintf(fields, sizeof fields, "Content-Type: %s\r\n", ct ? ct : "none/none");
        respond(c, fields, bm_str_data(&r->body), bm_str_len(&r->body));
    } else if (strcmp(t, "/ssz") == 0) {
        respond(c,
                "Content-Type: application/octet-stream\r\n"
                "Eth-Consensus-Version: electra\r\n"
                "Eth-Execution-Payload-Blinded: false\r\n"
                "Eth-Execution-Payload-Value: 123456789012345678901234567890\r\n"
                "Eth-Consensus-Block-Value: 98765432109876543210\r\n",
                ssz_reply, sizeof ssz_reply);
    } else if (strcmp(t, "/silent") == 0) {
        /* never answers */
    } else if (strcmp(t, "/partial") == 0) {
        char body[100];
        memset(body, 'p', sizeof body);
        sconn_printf(c, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n");
        sconn_write(c, body, sizeof body);
        sconn_end(c);
    } else if (strncmp(t, "/stream?", 8) == 0) {
        int n = 0, ms = 0;
        size_t size = 0;
        assert_int_equal(sscanf(t, "/stream?n=%d&size=%zu&ms=%d", &n, &size, &ms), 3);
        sconn_printf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                        "Transfer-Encoding: chunked\r\n\r\n");
        c->left = n > 0 ? n : -1;
        c->size = size;
        c->ms = (uint64_t)ms;
        c->off = 0;
        if (ms == 0 && n > 0) {
            while (c->left > 0)
                on_stream_tick(&c->timer);
        } else {
            uv_timer_start(&c->timer, on_stream_tick, c->ms, c->ms);
        }
    } else if (strcmp(t, "/stall") == 0) {
        sconn_printf(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n");
    } else if (strncmp(t, "/big?", 5) == 0) {
        size_t n = 0;
        int chunked = 0;
        assert_int_equal(sscanf(t, "/big?n=%zu&chunked=%d", &n, &chunked), 2);
        if (chunked) {
            sconn_printf(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
            c->size = n;
            c->off = 0;
            send_chunk(c);
            sconn_printf(c, "0\r\n\r\n");
        } else {
            unsigned char *b = malloc(n + 1);
            assert_non_null(b);
            for (size_t i = 0; i < n; i++)
                b[i] = pat(i);
            respond(c, "", b, n);
            free(b);
        }
    } else if (strcmp(t, "/early") == 0) {
        sconn_printf(c, "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
                        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Final: yes\r\n\r\nok");
    } else if (strcmp(t, "/bye") == 0) {
        /* answers, then closes the connection without having said so */
        respond(c, "", "bye", 3);
        sconn_end(c);
    } else if (strcmp(t, "/head") == 0) {
        sconn_printf(c, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\nX-Head: 1\r\n\r\n");
    } else {
        respond(c, "", t, strlen(t));
    }
}

/* Parses complete requests from the connection's input and answers them. */
static void parse_input(sconn_t *c)
{
    srv_t *s = c->srv;
    while (!c->closed && c->in_len > 0) {
        if (c->in[0] < 'A' || c->in[0] > 'Z') {
            /* Not HTTP (a TLS ClientHello): answer something a TLS client cannot parse. */
            sconn_printf(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
            sconn_end(c);
            return;
        }
        char *end = memmem(c->in, c->in_len, "\r\n\r\n", 4);
        if (!end)
            return;
        size_t head_len = (size_t)(end - c->in) + 4;
        size_t body_len = 0;
        const char *cl = memmem(c->in, head_len, "\r\nContent-Length:", 17);
        if (cl)
            body_len = strtoul(cl + 17, NULL, 10);
        if (c->in_len < head_len + body_len)
            return;
        assert_true(s->nreqs < MAX_REQS);
        sreq_t *r = &s->reqs[s->nreqs++];
        bm_hdrs_init(&r->h);
        r->conn_id = c->id;
        char *line_end = memmem(c->in, head_len, "\r\n", 2);
        *line_end = '\0';
        assert_int_equal(sscanf(c->in, "%15s %511s", r->method, r->target), 2);
        char *p = line_end + 2;
        while (p < c->in + head_len - 2) {
            char *e = memmem(p, (size_t)(c->in + head_len - p), "\r\n", 2);
            char *colon = memchr(p, ':', (size_t)(e - p));
            assert_non_null(colon);
            char *v = colon + 1;
            while (v < e && *v == ' ')
                v++;
            bm_hdrs_add(&r->h, p, (size_t)(colon - p), v, (size_t)(e - v));
            p = e + 2;
        }
        r->body = (bm_str_t)BM_STR_INIT;
        if (body_len)
            bm_str_append(&r->body, c->in + head_len, body_len);
        memmove(c->in, c->in + head_len + body_len, c->in_len - head_len - body_len);
        c->in_len -= head_len + body_len;
        handle(s, c, r);
    }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    (void)h;
    b->base = malloc(suggested);
    b->len = b->base ? suggested : 0;
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *b)
{
    sconn_t *c = st->data;
    if (nread < 0) {
        c->srv->eofs++;
        sconn_close(c);
    } else if (nread > 0) {
        if (c->in_len + (size_t)nread > c->in_cap) {
            size_t cap = c->in_cap ? c->in_cap : 4096;
            while (cap < c->in_len + (size_t)nread)
                cap *= 2;
            c->in = realloc(c->in, cap);
            assert_non_null(c->in);
            c->in_cap = cap;
        }
        memcpy(c->in + c->in_len, b->base, (size_t)nread);
        c->in_len += (size_t)nread;
        parse_input(c);
    }
    free(b->base);
}

static void on_accept(uv_stream_t *l, int status)
{
    srv_t *s = l->data;
    if (status < 0)
        return;
    sconn_t *c = calloc(1, sizeof *c);
    assert_non_null(c);
    c->srv = s;
    c->handles = 2;
    uv_tcp_init(s->loop, &c->tcp);
    uv_timer_init(s->loop, &c->timer);
    c->tcp.data = c;
    c->timer.data = c;
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    if (uv_accept(l, (uv_stream_t *)&c->tcp) != 0) {
        sconn_close(c);
        return;
    }
    c->id = ++s->accepts;
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

static void srv_start(srv_t *s, uv_loop_t *loop)
{
    memset(s, 0, sizeof *s);
    s->loop = loop;
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", 0, &a);
    assert_int_equal(uv_tcp_init(loop, &s->listener), 0);
    s->listener.data = s;
    assert_int_equal(uv_tcp_bind(&s->listener, (const struct sockaddr *)&a, 0), 0);
    assert_int_equal(uv_listen((uv_stream_t *)&s->listener, 256, on_accept), 0);
    struct sockaddr_storage ss;
    int len = sizeof ss;
    uv_tcp_getsockname(&s->listener, (struct sockaddr *)&ss, &len);
    s->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

static void srv_close(srv_t *s)
{
    while (s->conns)
        sconn_close(s->conns);
    uv_close((uv_handle_t *)&s->listener, NULL);
    for (int i = 0; i < s->nreqs; i++) {
        bm_hdrs_dispose(&s->reqs[i].h);
        bm_str_dispose(&s->reqs[i].body);
    }
}

/* Number of fields named `name` in a recorded request. */
static int count_fields(const sreq_t *r, const char *name)
{
    int n = 0;
    for (size_t i = 0; i < r->h.n; i++)
        if (bm_header_name_is(r->h.items[i].name, r->h.items[i].name_len, name))
            n++;
    return n;
}

/* ---- fixture ----------------------------------------------------------------------------------
 */

typedef struct fx {
    uv_loop_t loop;
    srv_t srv;
    bm_upstream_t *up;
    char base[64];
} fx_t;

static char g_url[1024];

/* The server's URL for `path` (a static buffer, valid until the next call). */
static const char *url(fx_t *f, const char *path)
{
    snprintf(g_url, sizeof g_url, "%s%.900s", f->base, path);
    return g_url;
}

static int fx_setup(void **state)
{
    fx_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    srv_start(&f->srv, &f->loop);
    snprintf(f->base, sizeof f->base, "http://127.0.0.1:%d", f->srv.port);
    bm_upstream_opts_t o;
    bm_upstream_opts_default(&o);
    f->up = bm_upstream_new(&f->loop, &o);
    assert_non_null(f->up);
    *state = f;
    return 0;
}

static void on_drain_guard(uv_timer_t *t)
{
    uv_stop(t->loop);
}

static int fx_teardown(void **state)
{
    fx_t *f = *state;
    if (f->up)
        bm_upstream_free(f->up);
    srv_close(&f->srv);
    /* Everything must close by itself; the unreferenced guard only stops a stuck loop. */
    uv_timer_t *g = malloc(sizeof *g);
    uv_timer_init(&f->loop, g);
    g->data = NULL;
    uv_timer_start(g, on_drain_guard, 5000, 0);
    uv_unref((uv_handle_t *)g);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    uv_close((uv_handle_t *)g, free_handle);
    uv_run(&f->loop, UV_RUN_NOWAIT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
    free(f);
    return 0;
}

/* ---- a recording client ------------------------------------------------------------------------
 */

typedef struct rec rec_t;
struct rec {
    fx_t *f;
    bm_xfer_t *x;
    int heads, datas, dones;
    int head_status;
    bool data_before_head;
    int err, status;
    bm_buf_t *body;
    bm_hdrs_t hdrs;
    char detail[512];
    uint64_t elapsed_us, ttfb_us;
    bm_str_t data;
    int pauses;           /* how often on_data paused */
    int pause_mode;       /* 1: return BM_XFER_PAUSE; 2: alternate with bm_upstream_pause */
    bool paused;          /* waiting for the resume timer */
    bool long_pause_done; /* one pause lasts longer than the idle timeout */
    void (*head_hook)(rec_t *r);
    void (*data_hook)(rec_t *r);
    void (*done_hook)(rec_t *r);
    rec_t *other;
    int other_datas_at_cancel;
    rec_t *next_rec; /* started from a hook */
    const char *next_path;
};

static void rec_init(rec_t *r, fx_t *f)
{
    memset(r, 0, sizeof *r);
    r->f = f;
    r->err = 1; /* not done */
    bm_hdrs_init(&r->hdrs);
}

static void rec_dispose(rec_t *r)
{
    bm_buf_unref(r->body);
    bm_hdrs_dispose(&r->hdrs);
    bm_str_dispose(&r->data);
}

static void rec_head(bm_xfer_t *x, int status, const bm_hdrs_t *h, void *ud)
{
    rec_t *r = ud;
    assert_ptr_equal(x, r->x);
    assert_non_null(h);
    r->heads++;
    r->head_status = status;
    if (r->head_hook)
        r->head_hook(r);
}

static void resume_later(void *arg)
{
    rec_t *r = arg;
    r->paused = false;
    bm_upstream_resume(r->x);
}

static int rec_data(bm_xfer_t *x, const char *p, size_t n, void *ud)
{
    rec_t *r = ud;
    assert_ptr_equal(x, r->x);
    assert_false(r->paused); /* no data while paused */
    if (r->heads == 0)
        r->data_before_head = true;
    r->datas++;
    bm_str_append(&r->data, p, n);
    if (r->data_hook)
        r->data_hook(r);
    if (r->pause_mode) {
        r->pauses++;
        r->paused = true;
        uint64_t ms = 1;
        if (!r->long_pause_done && bm_str_len(&r->data) > 64 * 1024) {
            r->long_pause_done = true;
            ms = 150; /* longer than the idle timeout: must not fail the transfer */
        }
        after(&r->f->loop, ms, resume_later, r);
        if (r->pause_mode == 2 && (r->pauses & 1)) {
            bm_upstream_pause(x);
            return 0;
        }
        return BM_XFER_PAUSE;
    }
    return 0;
}

static void rec_done(bm_xfer_t *x, const bm_xfer_result_t *res, void *ud)
{
    rec_t *r = ud;
    assert_ptr_equal(x, r->x);
    r->dones++;
    r->err = res->err;
    r->status = res->status;
    r->body = bm_buf_ref(res->body);
    bm_hdrs_copy(&r->hdrs, res->headers);
    assert_non_null(res->detail);
    snprintf(r->detail, sizeof r->detail, "%s", res->detail);
    r->elapsed_us = res->elapsed_us;
    r->ttfb_us = res->ttfb_us;
    if (r->done_hook)
        r->done_hook(r);
    r->x = NULL;
}

static const bm_xfer_cbs_t rec_cbs = {rec_head, rec_data, rec_done};

static bm_xfer_req_t req_get(const char *u)
{
    bm_xfer_req_t q;
    memset(&q, 0, sizeof q);
    q.method = "GET";
    q.url = u;
    return q;
}

static bm_xfer_t *start(fx_t *f, rec_t *r, const bm_xfer_req_t *q)
{
    r->x = bm_upstream_start(f->up, q, &rec_cbs, r);
    return r->x;
}

static bool body_is(const rec_t *r, const void *p, size_t n)
{
    return r->body && r->body->len == n && memcmp(r->body->data, p, n) == 0;
}

/* ---- tests -------------------------------------------------------------------------------------
 */

static void test_get_buffered(void **state)
{
    fx_t *f = *state;
    rec_t r;
    rec_init(&r, f);
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_hdrs_add_z(&h, "Accept", "application/json");
    bm_xfer_req_t q = req_get(url(f, "/hello"));
    q.headers = &h;
    assert_non_null(start(f, &r, &q));
    assert_int_equal(bm_upstream_active(f->up), 1);
    RUN_UNTIL(&f->loop, r.dones, 3000);
    assert_int_equal(r.dones, 1);
    assert_int_equal(r.err, 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.heads, 1);
    assert_int_equal(r.head_status, 200);
    assert_string_equal(r.detail, "");
    static const char want[] = "{\"data\":{\"version\":\"test/1.0\"}}";
    assert_true(body_is(&r, want, sizeof want - 1));
    assert_string_equal(bm_hdrs_get(&r.hdrs, "content-type"), "application/json");
    /* Response fields are kept as sent, duplicates and framing fields included. */
    assert_string_equal(bm_hdrs_get(&r.hdrs, "Content-Length"), "31");
    int tests = 0;
    for (size_t i = 0; i < r.hdrs.n; i++)
        if (bm_header_name_is(r.hdrs.items[i].name, r.hdrs.items[i].name_len, "X-Test"))
            tests++;
    assert_int_equal(tests, 2);
    assert_true(r.ttfb_us > 0);
    assert_true(r.elapsed_us >= r.ttfb_us);
    assert_int_equal(bm_upstream_active(f->up), 0);

    assert_int_equal(f->srv.nreqs, 1);
    sreq_t *s = &f->srv.reqs[0];
    assert_string_equal(s->method, "GET");
    assert_string_equal(s->target, "/hello");
    char host[64];
    snprintf(host, sizeof host, "127.0.0.1:%d", f->srv.port);
    assert_string_equal(bm_hdrs_get(&s->h, "Host"), host);
    assert_string_equal(bm_hdrs_get(&s->h, "Accept"), "application/json");
    assert_int_equal(count_fields(s, "Accept"), 1);
    bm_hdrs_dispose(&h);
    rec_dispose(&r);
}

static void test_post_json(void **state)
{
    fx_t *f = *state;
    rec_t r;
    rec_init(&r, f);
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_hdrs_add_z(&h, "Content-Type", "application/json; charset=utf-8");
    static const char json[] = "[{\"validator_index\":\"1\",\"pubkey\":\"0xab\"}]\n";
    bm_buf_t *body = bm_buf_from_str(json);
    bm_xfer_req_t q = req_get(url(f, "/echo"));
    q.method = "POST";
    q.headers = &h;
    q.body = body;
    assert_non_null(start(f, &r, &q));
    bm_buf_unref(body); /* the transfer holds its own reference */
    RUN_UNTIL(&f->loop, r.dones, 3000);
    assert_int_equal(r.err, 0);
    assert_int_equal(r.status, 200);
    assert_true(body_is(&r, json, sizeof json - 1));
    sreq_t *s = &f->srv.reqs[0];
    assert_string_equal(s->method, "POST");
    assert_string_equal(bm_hdrs_get(&s->h, "Content-Type"), "application/json; charset=utf-8");
    assert_int_equal(count_fields(s, "Content-Type"), 1);
    char cl[16];
    snprintf(cl, sizeof cl, "%zu", sizeof json - 1);
    assert_string_equal(bm_hdrs_get(&s->h, "Content-Length"), cl);
    assert_int_equal(bm_str_len(&s->body), sizeof json - 1);
    assert_memory_equal(bm_str_data(&s->body), json, sizeof json - 1);
    bm_hdrs_dispose(&h);
    rec_dispose(&r);
}

static void test_ssz_both_ways(void **state)
{
    fx_t *f = *state;
    rec_t r;
    rec_init(&r, f);
    unsigned char blob[600];
    for (size_t i = 0; i < sizeof blob; i++)
        blob[i] = (i % 3 == 0) ? 0 : pat(i);
    bm_buf_t *body = bm_buf_copy(blob, sizeof blob);
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_hdrs_add_z(&h, "Accept", "application/octet-stream");
    bm_hdrs_add_z(&h, "Content-Type", "application/octet-stream");
    bm_hdrs_add_z(&h, "Eth-Consensus-Version", "electra");
    bm_hdrs_add_z(&h, "Eth-Execution-Payload-Blinded", "true");
    bm_hdrs_add_z(&h, "Eth-Execution-Payload-Value", "115792089237316195423570985008687907853");
    bm_hdrs_add_z(&h, "Eth-Consensus-Block-Value", "1");
    bm_xfer_req_t q = req_get(url(f, "/ssz"));
    q.method = "POST";
    q.headers = &h;
    q.body = body;
    assert_non_null(start(f, &r, &q));
    RUN_UNTIL(&f->loop, r.dones, 3000);
    assert_int_equal(r.err, 0);
    assert_true(body_is(&r, ssz_reply, sizeof ssz_reply));
    assert_string_equal(bm_hdrs_get(&r.hdrs, "Content-Type"), "application/octet-stream");
    assert_string_equal(bm_hdrs_get(&r.hdrs, "Eth-Consensus-Version"), "electra");
    assert_string_equal(bm_hdrs_get(&r.hdrs, "Eth-Execution-Payload-Blinded"), "false");
    assert_string_equal(bm_hdrs_get(&r.hdrs, "Eth-Execution-Payload-Value"),
                        "123456789012345678901234567890");
    assert_string_equal(bm_hdrs_get(&r.hdrs, "Eth-Consensus-Block-Value"), "98765432109876543210");
    sreq_t *s = &f->srv.reqs[0];
    assert_int_equal(bm_str_len(&s->body), sizeof blob);
    assert_memory_equal(bm_str_data(&s->body), blob, sizeof blob);
    assert_string_equal(bm_hdrs_get(&s->h, "Accept"), "application/octet-stream");
    assert_string_equal(bm_hdrs_get(&s->h, "Content-Type"), "application/octet-stream");
    assert_string_equal(bm_hdrs_get(&s->h, "Eth-Consensus-Version"), "electra");
    assert_string_equal(bm_hdrs_get(&s->h, "Eth-Execution-Payload-Blinded"), "true");
    assert_string_equal(bm_hdrs_get(&s->h, "Eth-Execution-Payload-Value"),
                        "115792089237316195423570985008687907853");
    assert_string_equal(bm_hdrs_get(&s->h, "Eth-Consensus-Block-Value"), "1");
    bm_buf_unref(body);
    bm_hdrs_dispose(&h);
    rec_dispose(&r);
}

static void test_request_header_hygiene(void **state)
{
    fx_t *f = *state;
    rec_t r;
    rec_init(&r, f);
    bm_hdrs_t h, extra;
    bm_hdrs_init(&h);
    bm_hdrs_init(&extra);
    bm_hdrs_add_z(&h, "Accept-Encoding", "gzip, br");
    bm_hdrs_add_z(&h, "Connection", "keep-alive, X-Hop");
    bm_hdrs_add_z(&h, "X-Hop", "1");
    bm_hdrs_add_z(&h, "Keep-Alive", "timeout=5");
    bm_hdrs_add_z(&h, "TE", "trailers");
    bm_hdrs_add_z(&h, "Trailer", "X-Sum");
    bm_hdrs_add_z(&h, "Upgrade", "h2c");
    bm_hdrs_add_z(&h, "Proxy-Authorization", "Basic Zm9vOmJhcg==");
    bm_hdrs_add_z(&h, "Proxy-Connection", "keep-alive");
    bm_hdrs_add_z(&h, "Expect", "100-continue");
    bm_hdrs_add_z(&h, "Host", "evil.example");
    bm_hdrs_add_z(&h, "Content-Length", "999");
    bm_hdrs_add_z(&h, "Transfer-Encoding", "chunked");
    bm_hdrs_add_z(&h, "X-Keep", "yes");
    bm_hdrs_add_z(&h, "X-Empty", "");
    bm_hdrs_add_z(&extra, "X-Api-Key", "k3y");
    bm_hdrs_add_z(&extra, "Accept-Encoding", "deflate");
    bm_buf_t *body = bm_buf_from_str("{\"a\":1}");
    bm_xfer_req_t q = req_get(url(f, "/echo"));
    q.method = "POST";
    q.headers = &h;
    q.extra = &extra;
    q.body = body;
    assert_non_null(start(f, &r, &q));
    RUN_UNTIL(&f->loop, r.dones, 3000);
    assert_int_equal(r.err, 0);
    sreq_t *s = &f->srv.reqs[0];
    assert_int_equal(count_fields(s, "Accept-Encoding"), 1);
    assert_string_equal(bm_hdrs_get(&s->h, "Accept-Encoding"), "identity");
    static const char *const gone[] = {
        "Connection",        "X-Hop",   "Keep-Alive",          "TE",
        "Trailer",           "Upgrade", "Proxy-Authorization", "Proxy-Connection",
        "Transfer-Encoding",
    };
    for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++)
        if (count_fields(s, gone[i]))
            fail_msg("%s was forwarded", gone[i]);
    const char *expect = bm_hdrs_get(&s->h, "Expect");
    assert_true(expect == NULL || expect[0] == '\0');
    /* No invented Content-Type (libcurl would say application/x-www-form-urlencoded). */
    assert_int_equal(count_fields(s, "Content-Type"), 0);
    char host[64];
    snprintf(host, sizeof host, "127.0.0.1:%d", f->srv.port);
    assert_string_equal(bm_hdrs_get(&s->h, "Host"), host);
    assert_int_equal(count_fields(s, "Host"), 1);
    assert_string_equal(bm_hdrs_get(&s->h, "Content-Length"), "7");
    assert_int_equal(count_fields(s, "Content-Length"), 1);
    assert_string_equal(bm_hdrs_get(&s->h, "X-Keep"), "yes");
    assert_string_equal(bm_hdrs_get(&s->h, "X-Empty"), "");
    assert_string_equal(bm_hdrs_get(&s->h, "X-Api-Key"), "k3y");
    /* libcurl's default Accept stays when the caller sent none. */
    assert_string_equal(bm_hdrs_get(&s->h, "Accept"), "*/*");
    /* The echo saw no Content-Type either. */
    assert_string_equal(bm_hdrs_get(&r.hdrs, "Content-Type"), "none/none");
    bm_buf_unref(body);
    bm_hdrs_dispose(&h);
    bm_hdrs_dispose(&extra);
    rec_dispose(&r);
}

static void test_big_post_no_expect_stall(void **state)
{
    fx_t *f = *state;
    rec_t r;
    rec_init(&r, f);
    size_t n = 2u << 20;
    bm_buf_t *body = bm_buf_new(n);
    for (size_t i = 0; i < n; i++)
        body->data[i] = (char)pat(i);
    body->len = n;
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_hdrs_add_z(&h, "Content-Type", "application/octet-stream");
    bm_xfer_req_t q = req_get(url(f, "/ok"));
    q.method = "POST";
    q.headers = &h;
    q.body = body;
    assert_non_null(start(f, &r, &q));
    RUN_UNTIL(&f->loop, r.dones, 5000);
    assert_int_equal(r.err, 0);
    assert_int_equal(r.status, 200);
    sreq_t *s = &f->srv.reqs[0];
    assert_null(bm_hdrs_get(&s->h, "Expect"));
    assert_int_equal(bm_str_len(&s->body), n);
    assert_memory_equal(bm_str_data(&s->body), body->data, n);
    /* A behaviour bound, not a benchmark: libcurl's 100-continue wait alone is 1 s. */
    assert_true(r.elapsed_us < 500 * 1000);
    bm_buf_unref(body);
    bm_hdrs_dispose(&h);
    rec_dispose(&r);
}

/* A loopback port nobody listens on (bound, read, closed). */
static int closed_port(uv_loop_t *loop)
{
    uv_tcp_t t;
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", 0, &a);
    uv_tcp_init(loop, &t);
    assert_int_equal(uv_tcp_bind(&t, (const struct sockaddr *)&a, 0), 0);
    struct sockaddr_storage ss;
    int len = sizeof ss;
    uv_tcp_getsockname(&t, (struct sockaddr *)&ss, &len);
    int port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    uv_close((uv_handle_t *)&t, NULL);
    uv_run(loop, UV_RUN_NOWAIT);
    return port;
}

static void test_connection_refused(void **state)
{
    fx_t *f = *state;
    rec_t r;
    rec_init(&r, f);
    char u[64];
    snprintf(u, sizeof u, "http://127.0.0.1:%d/x", closed_port(&f->loop));
    bm_xfer_req_t q = req_get(u);
    q.connect_timeout_ms = 3000;
    assert_non_null(start(f, &r, &q));
    RUN_UNTIL(&f->loop, r.dones, 3000);
    assert_int_equal(r.dones, 1);
    assert_int_equal(r.err, BM_ECONNREFUSED);
    assert_int_equal(r.status, 0);
    assert_null(r.body);
    assert_int_equal(r.heads, 0);
    assert_true(r.detail[0] != '\0');
    assert_int_equal(r.ttfb_us, 0);
    assert_true(r.elapsed_us < 1000 * 1000); /* refused, not timed out */
    rec_dispose(&r);
}

static void test_timeout_no_answer(void **state)
{
    fx_t *f = *state;
    rec_t r;
    rec_init(&r, f);
    bm_xfer_req_t q = req_get(url(f, "/silent"));
    q.timeout_ms = 200;
    assert_non_null(start(f, &r, &q));
    RUN_UNTIL(&f->loop, r.dones, 3000);
    assert_int_equal(r.err, BM_ETIMEDOUT);
    assert_int_equal(r.status, 0);
    assert_int_equal(r.heads, 0);
    assert_true(r.elapsed_us >= 190 * 1000);
    assert_true(r.elapsed_us < 2000 * 1000);
    assert_int_equal(f->srv.nreqs, 1);
    rec_dispose(&r);
}

static void test_close_mid_body(void **state)
{
    fx_t *f = *state;
    rec_t r;
    rec_init(&r, f);
    bm_xfer_req_t q = req_get(url(f, "/partial"));
    assert_non_null(start(f, &r, &q));
    RUN_UNTIL(&f->loop, r.dones, 3000);
    assert_int_equal(r.err, BM_ECONNRESET);
    assert_int_equal(r.status, 200); /* the head had arrived */
    assert_int_equal(r.heads, 1);
    assert_null(r.body);
    rec_dispose(&r);
}

static void test_idle_timeout_stream(void **state)
{
    fx_t *f = *state;
    rec_t r;
    rec_init(&r, f);
    bm_xfer_req_t q = req_get(url(f, "/stall"));
    q.stream = true;
    q.idle_timeout_ms = 150;
    assert_non_null(start(f, &r, &q));
    RUN_UNTIL(&f->loop, r.dones, 3000);
    assert_int_equal(r.err, BM_ETIMEDOUT);
    assert_int_equal(r.heads, 1);
    assert_int_equal(r.status, 200);
    assert_int_equal(bm_str_len(&r.data), 5);
    assert_memory_equal(bm_str_data(&r.data), "first", 5);
    assert_null(r.body);
    assert_true(r.elapsed_us >= 140 * 1000);
    assert_non_null(strstr(r.detail, "idle"));
    /* The connection was abandoned, not left open. */
    RUN_UNTIL(&f->loop, f->srv.eofs == 1, 3000);
    assert_int_equal(f->srv.eofs, 1);
    rec_dispose(&r);
}

static void check_pattern(const rec_t *r, size_t n)
{
    assert_int_equal(bm_str_len(&r->data), n);
    const unsigned char *d = (const unsigned char *)bm_str_data(&r->data);
    for (size_t i = 0; i < n; i++)
        if (d[i] != pat(i))
            fail_msg("byte %zu is %u, want %u", i, d[i], pat(i));
}

static void run_pause_resume(fx_t *f, int mode)
{
    rec_t r;
    rec_init(&r, f);
    r.pause_mode = mode;
    /* 1 MiB in one burst: far more than one read, so libcurl must hold bytes while paused. */
    bm_xfer_req_t q = req_get(url(f, "/stream?n=256&size=4096&ms=0"));
    q.stream = true;
    q.idle_timeout_ms = 60;
    assert_non_null(start(f, &r, &q));
    RUN_UNTIL(&f->loop, r.dones, 10000);
    assert_int_equal(r.dones, 1);
    assert_int_equal(r.err, 0);
    assert_false(r.data_before_head);
    assert_int_equal(r.heads, 1);
    check_pattern(&r, 256 * 4096);
    assert_null(bm_hdrs_get(&r.hdrs, "X-Trailer"));
    assert_string_equal(bm_hdrs_get(&r.hdrs, "Transfer-Encoding"), "chunked");
    assert_true(r.pauses > 2);
    assert_true(r.long_pause_done);
    assert_null(r.body);
    /* A resume timer may still be pending for the last pause: let it run out. */
    RUN_UNTIL(&f->loop, !r.paused, 1000);
    assert_false(r.paused);
    rec_dispose(&r);
}

static void test_stream_pause_resume(void **state)
{
    run_pause_resume(*state, 1);
}

typedef struct pause_probe {
    rec_t *r;
    int dones_at_resume;
    bool resumed;
} pause_probe_t;

static void probe_resume(void *arg)
{
    pause_probe_t *p = arg;
    p->dones_at_resume = p->r->dones;
    p->resumed = true;
    if (p->r->x)
        bm_upstream_resume(p->r->x);
}

static void test_stream_pause_api(void **state)
{
    run_pause_resume(*state, 2);
}

static void test_pause_edges(void **state)
{
    fx_t *f = *state;
    /* Paused right after the start, before any connection exists; buffered mode. */
    rec_t r;
    rec_init(&r, f);
    bm_xfer_req_t q = req_get(url(f, "/hello"));
    assert_non_null(start(f, &r, &q));
    bm_upstream_pause(r.x);
    bm_upstream_pause(r.x);
    pause_probe_t p = {&r, -1, false};
    after(&f->loop, 100, probe_resume, &p);
    RUN_UNTIL(&f->loop, r.dones, 3000);
    assert_true(p.resumed);
    assert_int_equal(p.dones_at_resume, 0); /* the body was held while paused */
    assert_int_equal(r.err, 0);
    assert_true(body_is(&r, "{\"data\":{\"version\":\"test/1.0\"}}", 31));
    rec_dispose(&r);

    /* A stream whose only piece pauses: the end arrives while paused and still completes. */
    rec_init(&r, f);
    r.pause_mode = 1;
    q = req_get(url(f, "/stream?n=1&size=10&ms=0"));
    q.stream = true;
    assert_non_null(start(f, &r, &q));
    RUN_UNTIL(&f->loop, r.dones && !r.paused, 3000);
    assert_int_equal(r.dones, 1);
    assert_int_equal(r.err, 0);
    check_pattern(&r, 10);
    rec_dispose(&r);

    /* Resume without pause, pause and resume after the end: ignored. */
    rec_init(&r, f);
    q = req_get(url(f, "/hello"));
    assert_non_null(start(f, &r, &q));
    bm_upstream_resume(r.x);
    RUN_UNTIL(&f->loop, r.dones, 3000);
    assert_int_equal(r.err, 0);
    rec_dispose(&r);
}

static void cancel_self(rec_t *r)
{
    bm_upstream_cancel(r->x);
    bm_upstream_cancel(r->x); /* idempotent until freed */
}

static void test_cancel_in_own_on_data(void **state)
{
    fx_t *f = *state;
    rec_t r;
    rec_init(&r, f);
    r.data_hook = cancel_self;
    /* 50 chunks in one burst: libcurl has more pieces for on_data in the same read. */
    bm_xfer_req_t q = req_get(url(f, "/stream?n=50&size=100&ms=0"));
    q.stream = true;
    assert_non_null(start(f, &r, &q));
    RUN_UNTIL(&f->loop, f->srv.eofs == 1, 3000);
    assert_int_equal(f->srv.eofs, 1);
    assert_int_equal(r.datas, 1);
    assert_int_equal(r.dones, 0);
    assert_int_equal(bm_upstream_active(f->up), 0);
    rec_dispose(&r);

    /* From on_head: no on_data, no on_done. */
    rec_init(&r, f);
    r.head_hook = cancel_self;
    q = req_get(url(f, "/stream?n=50&size=100&ms=0"));
    q.stream = true;
    assert_non_null(start(f, &r, &q));
    RUN_UNTIL(&f->loop, f->srv.eofs == 2, 3000);
    assert_int_equal(f->srv.eofs, 2);
    assert_int_equal(r.heads, 1);
    assert_int_equal(r.datas + r.dones, 0);
    rec_dispose(&r);

    /* From its own on_done: ignored (the transfer is finishing anyway). */
    rec_init(&r, f);
    r.done_hook = cancel_self;
    q = req_get(url(f, "/hello"));
    assert_non_null(start(f, &r, &q));
    RUN_UNTIL(&f->loop, r.dones, 3000);
    assert_int_equal(r.dones, 1);
    assert_int_equal(r.err, 0);
    assert_int_equal(bm_upstream_active(f->up), 0);
    rec_dispose(&r);
}

static void cancel_other(rec_t *r)
{
    if (r->other && r->other->x) {
        r->other_datas_at_cancel = r->other->datas;
        bm_upstream_cancel(r->other->x);
        r->other->x = NULL;
    }
}

static void test_cancel_other_in_on_data(void **state)
{
    fx_t *f = *state;
    rec_t a, b;
    rec_init(&a, f);
    rec_init(&b, f);
    bm_xfer_req_t qb = req_get(url(f, "/stream?n=0&size=10&ms=5"));
    qb.stream = true;
    assert_non_null(start(f, &b, &qb));
    RUN_UNTIL(&f->loop, b.datas >= 2, 3000);
    assert_true(b.datas >= 2);
    a.other = &b;
    a.data_hook = cancel_other;
    bm_xfer_req_t qa = req_get(url(f, "/stream?n=3&size=10&ms=5"));
    qa.stream = true;
    assert_non_null(start(f, &a, &qa));
    RUN_UNTIL(&f->loop, a.dones && f->srv.eofs == 1, 3000);
    assert_int_equal(a.dones, 1);
    assert_int_equal(a.err, 0);
    check_pattern(&a, 30);
    assert_int_equal(f->srv.eofs, 1); /* b's connection was closed */
    assert_int_equal(b.datas, a.other_datas_at_cancel);
    assert_int_equal(b.dones, 0);
    RUN_FOR(&f->loop, 30);
    assert_int_equal(b.datas, a.other_datas_at_cancel);
    assert_int_equal(bm_upstream_active(f->up), 0);
    rec_dispose(&a);
    rec_dispose(&b);
}

static void test_cancel_in_flight(void **state)
{
    fx_t *f = *state;
    rec_t r, s;
    rec_init(&r, f);
    rec_init(&s, f);
    bm_xfer_req_t q = req_get(url(f, "/silent"));
    assert_non_null(start(f, &r, &q));
    bm_xfer_req_t q2 = req_get(url(f, "/stream?n=0&size=10&ms=5"));
    q2.stream = true;
    assert_non_null(start(f, &s, &q2));
    RUN_UNTIL(&f->loop, f->srv.nreqs == 2 && s.datas > 0, 3000);
    assert_int_equal(f->srv.nreqs, 2);
    assert_int_equal(bm_upstream_active(f->up), 2);
    bm_upstream_cancel(r.x);
    bm_upstream_cancel(s.x);
    int datas = s.datas;
    assert_int_equal(bm_upstream_active(f->up), 0);
    RUN_UNTIL(&f->loop, f->srv.eofs == 2, 3000);
    assert_int_equal(f->srv.eofs, 2);
    assert_int_equal(r.heads + r.datas + r.dones, 0);
    assert_int_equal(s.datas, datas);
    assert_int_equal(s.dones, 0);

    /* Cancel right after the start, before libcurl did anything. */
    rec_t t;
    rec_init(&t, f);
    bm_xfer_req_t q3 = req_get(url(f, "/hello"));
    assert_non_null(start(f, &t, &q3));
    bm_upstream_cancel(t.x);
    RUN_FOR(&f->loop, 50);
    assert_int_equal(t.heads + t.datas + t.dones, 0);
    rec_dispose(&r);
    rec_dispose(&s);
    rec_dispose(&t);
}

static void start_next(rec_t *r)
{
    if (!r->next_rec)
        return;
    bm_xfer_req_t q = req_get(url(r->f, r->next_path));
    assert_non_null(start(r->f, r->next_rec, &q));
}

static void test_start_from_callbacks(void **state)
{
    fx_t *f = *state;
    rec_t a, b, c;
    rec_init(&a, f);
    rec_init(&b, f);
    rec_init(&c, f);
    a.head_hook = start_next; /* from inside libcurl */
    a.next_rec = &b;
    a.next_path = "/b";
    b.done_hook = start_next; /* from on_done */
    b.next_rec = &c;
    b.next_path = "/c";
    bm_xfer_req_t q = req_get(url(f, "/a"));
    assert_non_null(start(f, &a, &q));
    RUN_UNTIL(&f->loop, a.dones && b.dones && c.dones, 3000);
    assert_int_equal(a.err, 0);
    assert_int_equal(b.err, 0);
    assert_int_equal(c.err, 0);
    assert_true(body_is(&a, "/a", 2));
    assert_true(body_is(&b, "/b", 2));
    assert_true(body_is(&c, "/c", 2));
    assert_int_equal(bm_upstream_active(f->up), 0);
    rec_dispose(&a);
    rec_dispose(&b);
    rec_dispose(&c);
}

static void test_connection_reuse(void **state)
{
    fx_t *f = *state;
    for (int i = 0; i < 3; i++) {
        rec_t r;
        rec_init(&r, f);
        bm_xfer_req_t q = req_get(url(f, "/hello"));
        assert_non_null(start(f, &r, &q));
        RUN_UNTIL(&f->loop, r.dones, 3000);
        assert_int_equal(r.err, 0);
        rec_dispose(&r);
    }
    assert_int_equal(f->srv.nreqs, 3);
    assert_int_equal(f->srv.accepts, 1);
    assert_int_equal(f->srv.reqs[2].conn_id, f->srv.reqs[0].conn_id);
}

static void test_credentials(void **state)
{
    fx_t *f = *state;
    char *logbuf = NULL;
    size_t loglen = 0;
    FILE *log = open_memstream(&logbuf, &loglen);
    assert_non_null(log);
    bm_log_setup(BM_LOG_DEBUG, BM_LOG_TEXT, log);

    /* user:password -> Basic; the client's own Authorization does not override it. */
    rec_t r;
    rec_init(&r, f);
    char u[128];
    snprintf(u, sizeof u, "http://user:s3cret@127.0.0.1:%d/auth", f->srv.port);
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_hdrs_add_z(&h, "Authorization", "Bearer client-token");
    bm_xfer_req_t q = req_get(u);
    q.headers = &h;
    assert_non_null(start(f, &r, &q));
    RUN_UNTIL(&f->loop, r.dones, 3000);
    assert_int_equal(r.err, 0);
    assert_string_equal(bm_hdrs_get(&f->srv.reqs[0].h, "Authorization"), "Basic dXNlcjpzM2NyZXQ=");
    assert_int_equal(count_fields(&f->srv.reqs[0], "Authorization"), 1);
    rec_dispose(&r);

    /* A lone token as user name. */
    rec_init(&r, f);
    snprintf(u, sizeof u, "http://tok3n@127.0.0.1:%d/auth", f->srv.port);
    q = req_get(u);
    assert_non_null(start(f, &r, &q));
    RUN_UNTIL(&f->loop, r.dones, 3000);
    assert_int_equal(r.err, 0);
    assert_string_equal(bm_hdrs_get(&f->srv.reqs[1].h, "Authorization"), "Basic dG9rM246");
    rec_dispose(&r);

    /* Without credentials in the URL the client's Authorization passes. */
    rec_init(&r, f);
    q = req_get(url(f, "/auth"));
    q.headers = &h;
    assert_non_null(start(f, &r, &q));
    RUN_UNTIL(&f->loop, r.dones, 3000);
    assert_string_equal(bm_hdrs_get(&f->srv.reqs[2].h, "Authorization"), "Bearer client-token");
    rec_dispose(&r);

    /* Failures: neither the detail nor the log shows the password or the token. */
    int port = closed_port(&f->loop);
    static const char *const fmts[] = {"http://user:s3cret@127.0.0.1:%d/x",
                                       "http://tok3n@127.0.0.1:%d/x"};
    for (int i = 0; i < 2; i++) {
        rec_init(&r, f);
        snprintf(u, sizeof u, fmts[i], port);
        q = req_get(u);
        assert_non_null(start(f, &r, &q));
        RUN_UNTIL(&f->loop, r.dones, 3000);
        assert_int_equal(r.err, BM_ECONNREFUSED);
        assert_null(strstr(r.detail, "s3cret"));
        assert_null(strstr(r.detail, "tok3n"));
        rec_dispose(&r);
    }
    fflush(log);
    bm_log_setup(BM_LOG_INFO, BM_LOG_TEXT, NULL);
    fclose(log);
    assert_non_null(logbuf);
    assert_null(strstr(logbuf, "s3cret"));
    assert_null(strstr(logbuf, "tok3n"));
    assert_non_null(strstr(logbuf, "user:***@127.0.0.1"));
    assert_non_null(strstr(logbuf, "http://***@127.0.0.1"));
    free(logbuf);
    bm_hdrs_dispose(&h);
}

static void test_too_big(void **state)
{
    fx_t *f = *state;
    static const struct {
        const char *path;
        size_t max;
        int err;
    } cases[] = {
        {"/big?n=5000&chunked=0", 1000, BM_ETOOBIG}, /* refused on Content-Length */
        {"/big?n=5000&chunked=1", 1000, BM_ETOOBIG}, /* refused while counting */
        {"/big?n=1000&chunked=1", 1000, 0},
        {"/big?n=1000&chunked=0", 1000, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rec_t r;
        rec_init(&r, f);
        bm_xfer_req_t q = req_get(url(f, cases[i].path));
        q.max_response_bytes = cases[i].max;
        assert_non_null(start(f, &r, &q));
        RUN_UNTIL(&f->loop, r.dones, 3000);
        if (r.err != cases[i].err)
            fail_msg("%s: err %d, want %d (%s)", cases[i].path, r.err, cases[i].err, r.detail);
        if (cases[i].err == 0) {
            assert_non_null(r.body);
            assert_int_equal(r.body->len, 1000);
            for (size_t k = 0; k < 1000; k++)
                assert_int_equal((unsigned char)r.body->data[k], pat(k));
        } else {
            assert_null(r.body);
        }
        rec_dispose(&r);
    }
}

static int count_done(const rec_t *r, int n)
{
    int done = 0;
    for (int i = 0; i < n; i++)
        done += r[i].dones;
    return done;
}

static void test_many_concurrent(void **state)
{
    fx_t *f = *state;
    enum { N = 100 };
    rec_t *r = calloc(N, sizeof *r);
    assert_non_null(r);
    char paths[N][32];
    for (int i = 0; i < N; i++) {
        rec_init(&r[i], f);
        snprintf(paths[i], sizeof paths[i], "/n/%d", i);
        bm_xfer_req_t q = req_get(url(f, paths[i]));
        assert_non_null(start(f, &r[i], &q));
    }
    assert_int_equal(bm_upstream_active(f->up), N);
    RUN_UNTIL(&f->loop, count_done(r, N) == N, 10000);
    assert_int_equal(count_done(r, N), N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(r[i].err, 0);
        assert_int_equal(r[i].status, 200);
        assert_true(body_is(&r[i], paths[i], strlen(paths[i])));
        rec_dispose(&r[i]);
    }
    assert_int_equal(bm_upstream_active(f->up), 0);
    free(r);
}

static void test_free_in_flight(void **state)
{
    fx_t *f = *state;
    rec_t r[4];
    for (int i = 0; i < 3; i++) {
        rec_init(&r[i], f);
        bm_xfer_req_t q = req_get(url(f, "/silent"));
        assert_non_null(start(f, &r[i], &q));
    }
    rec_init(&r[3], f);
    bm_xfer_req_t q = req_get(url(f, "/stream?n=0&size=10&ms=5"));
    q.stream = true;
    q.idle_timeout_ms = 1000;
    assert_non_null(start(f, &r[3], &q));
    RUN_UNTIL(&f->loop, f->srv.nreqs == 4 && r[3].datas > 0, 3000);
    assert_int_equal(f->srv.nreqs, 4);
    int datas = r[3].datas;
    bm_upstream_free(f->up);
    f->up = NULL;
    RUN_UNTIL(&f->loop, f->srv.eofs == 4, 3000);
    assert_int_equal(f->srv.eofs, 4);
    for (int i = 0; i < 3; i++)
        assert_int_equal(r[i].heads + r[i].datas + r[i].dones, 0);
    assert_int_equal(r[3].datas, datas);
    assert_int_equal(r[3].dones, 0);
    for (int i = 0; i < 4; i++)
        rec_dispose(&r[i]);
    /* fx_teardown checks that the loop closes. */
}

static void free_client(rec_t *r)
{
    bm_upstream_free(r->f->up);
    r->f->up = NULL;
}

static void test_free_inside_callbacks(void **state)
{
    fx_t *f = *state;
    /* From on_data: the other transfer gets no callback either. */
    rec_t a, b;
    rec_init(&a, f);
    rec_init(&b, f);
    bm_xfer_req_t qb = req_get(url(f, "/silent"));
    assert_non_null(start(f, &b, &qb));
    a.data_hook = free_client;
    bm_xfer_req_t qa = req_get(url(f, "/stream?n=0&size=10&ms=5"));
    qa.stream = true;
    assert_non_null(start(f, &a, &qa));
    RUN_UNTIL(&f->loop, f->srv.eofs == 2, 3000);
    assert_int_equal(f->srv.eofs, 2);
    assert_int_equal(a.datas, 1);
    assert_int_equal(a.dones + b.heads + b.dones, 0);
    rec_dispose(&a);
    rec_dispose(&b);

    /* From on_done, with a transfer started in the same callback. */
    bm_upstream_opts_t o;
    bm_upstream_opts_default(&o);
    f->up = bm_upstream_new(&f->loop, &o);
    assert_non_null(f->up);
    rec_t c, d;
    rec_init(&c, f);
    rec_init(&d, f);
    c.done_hook = free_client;
    bm_xfer_req_t qc = req_get(url(f, "/hello"));
    assert_non_null(start(f, &c, &qc));
    bm_xfer_req_t qd = req_get(url(f, "/silent"));
    assert_non_null(start(f, &d, &qd));
    RUN_UNTIL(&f->loop, c.dones && f->srv.eofs == 4, 3000);
    assert_int_equal(c.dones, 1);
    assert_int_equal(c.err, 0);
    assert_int_equal(d.heads + d.dones, 0);
    rec_dispose(&c);
    rec_dispose(&d);
}

static void test_interim_head_skipped(void **state)
{
    fx_t *f = *state;
    rec_t r;
    rec_init(&r, f);
    bm_xfer_req_t q = req_get(url(f, "/early"));
    assert_non_null(start(f, &r, &q));
    RUN_UNTIL(&f->loop, r.dones, 3000);
    assert_int_equal(r.err, 0);
    assert_int_equal(r.heads, 1);
    assert_int_equal(r.head_status, 200);
    assert_int_equal(r.status, 200);
    assert_string_equal(bm_hdrs_get(&r.hdrs, "X-Final"), "yes");
    assert_null(bm_hdrs_get(&r.hdrs, "Link"));
    assert_true(body_is(&r, "ok", 2));
    rec_dispose(&r);
}

static void test_methods(void **state)
{
    fx_t *f = *state;
    rec_t r;
    rec_init(&r, f);
    bm_xfer_req_t q = req_get(url(f, "/head"));
    q.method = "HEAD";
    assert_non_null(start(f, &r, &q));
    RUN_UNTIL(&f->loop, r.dones, 3000);
    assert_int_equal(r.err, 0);
    assert_int_equal(r.status, 200);
    assert_string_equal(bm_hdrs_get(&r.hdrs, "X-Head"), "1");
    assert_non_null(r.body);
    assert_int_equal(r.body->len, 0);
    assert_string_equal(f->srv.reqs[0].method, "HEAD");
    rec_dispose(&r);

    /* HEAD with a body (dropped) and a Content-Length above the limit: still fine. */
    rec_init(&r, f);
    bm_buf_t *junk = bm_buf_from_str("junk");
    q = req_get(url(f, "/head"));
    q.method = "HEAD";
    q.body = junk;
    q.max_response_bytes = 5;
    q.timeout_ms = 2000;
    assert_non_null(start(f, &r, &q));
    RUN_UNTIL(&f->loop, r.dones, 3000);
    assert_int_equal(r.err, 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.body->len, 0);
    bm_buf_unref(junk);
    rec_dispose(&r);

    rec_init(&r, f);
    bm_buf_t *body = bm_buf_from_str("payload");
    q = req_get(url(f, "/echo"));
    q.method = "PUT";
    q.body = body;
    assert_non_null(start(f, &r, &q));
    RUN_UNTIL(&f->loop, r.dones, 3000);
    assert_int_equal(r.err, 0);
    assert_true(body_is(&r, "payload", 7));
    assert_string_equal(f->srv.reqs[2].method, "PUT");
    assert_int_equal(count_fields(&f->srv.reqs[2], "Content-Type"), 0);
    bm_buf_unref(body);
    rec_dispose(&r);

    rec_init(&r, f);
    q = req_get(url(f, "/thing"));
    q.method = "DELETE";
    assert_non_null(start(f, &r, &q));
    RUN_UNTIL(&f->loop, r.dones, 3000);
    assert_int_equal(r.err, 0);
    assert_string_equal(f->srv.reqs[3].method, "DELETE");
    rec_dispose(&r);

    /* POST without a body sends Content-Length: 0. */
    rec_init(&r, f);
    q = req_get(url(f, "/echo"));
    q.method = "POST";
    assert_non_null(start(f, &r, &q));
    RUN_UNTIL(&f->loop, r.dones, 3000);
    assert_int_equal(r.err, 0);
    assert_string_equal(bm_hdrs_get(&f->srv.reqs[4].h, "Content-Length"), "0");
    rec_dispose(&r);
}

/* Runs one request to completion and returns its error code (the record is disposed). */
static int run_one(fx_t *f, const bm_xfer_req_t *q, size_t *body_len)
{
    rec_t r;
    rec_init(&r, f);
    assert_non_null(start(f, &r, q));
    RUN_UNTIL(&f->loop, r.dones, 5000);
    assert_int_equal(r.dones, 1);
    int err = r.err;
    if (body_len)
        *body_len = r.body ? r.body->len : (size_t)-1;
    rec_dispose(&r);
    return err;
}

/*
 * Transfers and their easy handles are recycled (last in, first out), and a handle whose
 * transfer ended cleanly keeps its options for the next request, which sets only what
 * varies. Requests run one after the other here, so each reuses the previous one's
 * handle: none may inherit a method, a body, a header, credentials, a timeout or a size
 * limit from the request before it.
 */
static void test_no_option_leaks_between_requests(void **state)
{
    fx_t *f = *state;
    char u[128];
    bm_buf_t *body = bm_buf_from_str("payload");
    bm_hdrs_t extra;
    bm_hdrs_init(&extra);
    bm_hdrs_add_z(&extra, "X-Api-Key", "k1");
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_hdrs_add_z(&h, "Content-Type", "application/json");

    /* POST with a body, credentials, extra fields and a timeout ... */
    snprintf(u, sizeof u, "http://user:s3cret@127.0.0.1:%d/echo", f->srv.port);
    bm_xfer_req_t q = req_get(u);
    q.method = "POST";
    q.body = body;
    q.headers = &h;
    q.extra = &extra;
    q.timeout_ms = 300;
    assert_int_equal(run_one(f, &q, NULL), 0);
    sreq_t *s = &f->srv.reqs[0];
    assert_string_equal(s->method, "POST");
    assert_string_equal(bm_str_data(&s->body), "payload");
    assert_non_null(bm_hdrs_get(&s->h, "Authorization"));

    /* ... then a plain GET: nothing of it carries over. */
    q = req_get(url(f, "/echo"));
    size_t n = 0;
    assert_int_equal(run_one(f, &q, &n), 0);
    s = &f->srv.reqs[1];
    assert_string_equal(s->method, "GET");
    assert_int_equal(bm_str_len(&s->body), 0);
    assert_int_equal(n, 0);
    assert_null(bm_hdrs_get(&s->h, "Content-Length"));
    assert_null(bm_hdrs_get(&s->h, "Content-Type"));
    assert_null(bm_hdrs_get(&s->h, "Authorization"));
    assert_null(bm_hdrs_get(&s->h, "X-Api-Key"));
    assert_null(bm_hdrs_get(&s->h, "Expect"));
    assert_string_equal(bm_hdrs_get(&s->h, "Accept-Encoding"), "identity");
    assert_int_equal(s->conn_id, f->srv.reqs[0].conn_id);

    /* The timeout of the POST (300 ms) does not limit a slow GET that has none. */
    q = req_get(url(f, "/stream?n=4&size=10&ms=120"));
    assert_int_equal(run_one(f, &q, &n), 0);
    assert_int_equal(n, 40);

    /* A custom method with a body, then GET: the method and the body are gone. */
    q = req_get(url(f, "/echo"));
    q.method = "PUT";
    q.body = body;
    assert_int_equal(run_one(f, &q, &n), 0);
    assert_int_equal(n, 7);
    assert_string_equal(f->srv.reqs[3].method, "PUT");
    q = req_get(url(f, "/echo"));
    assert_int_equal(run_one(f, &q, &n), 0);
    assert_string_equal(f->srv.reqs[4].method, "GET");
    assert_int_equal(bm_str_len(&f->srv.reqs[4].body), 0);

    /* HEAD, then GET: the GET gets its body. */
    q = req_get(url(f, "/head"));
    q.method = "HEAD";
    assert_int_equal(run_one(f, &q, &n), 0);
    assert_int_equal(n, 0);
    q = req_get(url(f, "/hello"));
    assert_int_equal(run_one(f, &q, &n), 0);
    assert_int_equal(n, 31);
    assert_string_equal(f->srv.reqs[6].method, "GET");

    /* HEAD, then POST: a POST, with its body. */
    q = req_get(url(f, "/head"));
    q.method = "HEAD";
    assert_int_equal(run_one(f, &q, NULL), 0);
    q = req_get(url(f, "/echo"));
    q.method = "POST";
    q.body = body;
    assert_int_equal(run_one(f, &q, &n), 0);
    assert_int_equal(n, 7);
    assert_string_equal(f->srv.reqs[8].method, "POST");

    /* A small size limit, then requests without one (buffered, streamed). */
    q = req_get(url(f, "/hello"));
    q.max_response_bytes = 64;
    assert_int_equal(run_one(f, &q, &n), 0);
    q = req_get(url(f, "/big?n=5000&chunked=0"));
    q.stream = true;
    assert_int_equal(run_one(f, &q, NULL), 0);
    q = req_get(url(f, "/hello"));
    q.max_response_bytes = 64;
    assert_int_equal(run_one(f, &q, &n), 0);
    q = req_get(url(f, "/big?n=5000&chunked=0"));
    assert_int_equal(run_one(f, &q, &n), 0);
    assert_int_equal(n, 5000);

    /* A failed transfer (its handle is reset), then a normal one. */
    q = req_get(url(f, "/big?n=5000&chunked=1"));
    q.max_response_bytes = 100;
    assert_int_equal(run_one(f, &q, NULL), BM_ETOOBIG);
    q = req_get(url(f, "/big?n=5000&chunked=1"));
    assert_int_equal(run_one(f, &q, &n), 0);
    assert_int_equal(n, 5000);

    bm_buf_unref(body);
    bm_hdrs_dispose(&h);
    bm_hdrs_dispose(&extra);
}

/*
 * Between requests the socket of an idle connection stays watched (parked) rather than
 * being closed and watched anew. When the node closes that idle connection the watcher
 * must stop (the loop goes quiet instead of spinning on a readable socket), and the next
 * request must get a new connection.
 */
static void test_idle_connection_closed_by_node(void **state)
{
    fx_t *f = *state;
    bm_xfer_req_t q = req_get(url(f, "/bye"));
    size_t n = 0;
    assert_int_equal(run_one(f, &q, &n), 0);
    assert_int_equal(n, 3);
    RUN_UNTIL(&f->loop, f->srv.conns == NULL, 3000);
    assert_null(f->srv.conns);
    /* The loop must go idle: a spinning watcher would run it thousands of times. */
    guard_t *g = guard_start(&f->loop, 100);
    int turns = 0;
    while (!g->expired) {
        uv_run(&f->loop, UV_RUN_ONCE);
        turns++;
    }
    guard_stop(g);
    assert_true(turns < 20);
    for (int i = 0; i < 2; i++) {
        q = req_get(url(f, "/hello"));
        assert_int_equal(run_one(f, &q, &n), 0);
        assert_int_equal(n, 31);
    }
    assert_int_equal(f->srv.accepts, 2);
    assert_int_equal(f->srv.reqs[2].conn_id, f->srv.reqs[1].conn_id);
}

/*
 * The request target reaches the node byte for byte, whichever way the URL reaches
 * libcurl (a plain path goes as a pre-parsed URL, anything else as a string libcurl
 * parses): percent-escapes keep their case, "//" stays a path, a query stays as written.
 */
static void test_targets_sent_verbatim(void **state)
{
    fx_t *f = *state;
    static const char *const targets[] = {
        "/eth/v1/beacon/states/head/finality_checkpoints",
        "/eth/v1/validator/duties/attester/1?x=1&y=a,b",
        "/eth/v1/events?topics=head&topics=block",
        "//evil.com/x",
        "/@evil.com:80/x",
        "/a%2Fb?q=%2C%2c",
        "/A%3a?%3A",
        "/x?",
        "/x?a?b=/c",
        "/.well-known/x",
        "/a/..b/c.",
        "/",
    };
    for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++) {
        bm_xfer_req_t q = req_get(url(f, targets[i]));
        assert_int_equal(run_one(f, &q, NULL), 0);
        assert_int_equal(f->srv.nreqs, (int)i + 1);
        if (strcmp(f->srv.reqs[i].target, targets[i]) != 0)
            fail_msg("sent %s as %s", targets[i], f->srv.reqs[i].target);
    }
    /* Dot segments are removed as libcurl always did (bm_url_join refuses them anyway). */
    bm_xfer_req_t qd = req_get(url(f, "/a/./b/../c?d=/./"));
    assert_int_equal(run_one(f, &qd, NULL), 0);
    assert_string_equal(f->srv.reqs[f->srv.nreqs - 1].target, "/a/c?d=/./");
    /* A base URL with a path prefix and credentials, twice (the parsed prefix is reused). */
    char u[256];
    for (int i = 0; i < 2; i++) {
        snprintf(u, sizeof u, "http://user:pw@127.0.0.1:%d/prefix/eth/v1/node/version?i=%d",
                 f->srv.port, i);
        bm_xfer_req_t q = req_get(u);
        assert_int_equal(run_one(f, &q, NULL), 0);
        sreq_t *r = &f->srv.reqs[f->srv.nreqs - 1];
        snprintf(u, sizeof u, "/prefix/eth/v1/node/version?i=%d", i);
        assert_string_equal(r->target, u);
        assert_string_equal(bm_hdrs_get(&r->h, "Authorization"), "Basic dXNlcjpwdw==");
    }
    /* Without credentials: another prefix, and no Authorization. */
    bm_xfer_req_t q = req_get(url(f, "/after"));
    assert_int_equal(run_one(f, &q, NULL), 0);
    assert_string_equal(f->srv.reqs[f->srv.nreqs - 1].target, "/after");
    assert_null(bm_hdrs_get(&f->srv.reqs[f->srv.nreqs - 1].h, "Authorization"));
}

/* Proxy settings in the environment are never used: requests go straight to the node. */
static void test_env_proxy_ignored(void **state)
{
    fx_t *f = *state;
    char proxy[64];
    snprintf(proxy, sizeof proxy, "http://127.0.0.1:%d", closed_port(&f->loop));
    static const char *const vars[] = {"http_proxy", "HTTP_PROXY", "https_proxy", "ALL_PROXY",
                                       "all_proxy"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        setenv(vars[i], proxy, 1);
    setenv("no_proxy", "", 1);
    bm_xfer_req_t q = req_get(url(f, "/hello"));
    size_t n = 0;
    int err = run_one(f, &q, &n);
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
    unsetenv("no_proxy");
    assert_int_equal(err, 0);
    assert_int_equal(n, 31);
    assert_string_equal(f->srv.reqs[0].target, "/hello");
}

static void test_https_goes_through_tls(void **state)
{
    fx_t *f = *state;
    /* The plain server answers the ClientHello with HTTP: the handshake must fail as TLS. */
    bm_upstream_opts_t o;
    bm_upstream_opts_default(&o);
    o.tls_verify = false;
    bm_upstream_t *up2 = bm_upstream_new(&f->loop, &o);
    assert_non_null(up2);
    for (int i = 0; i < 2; i++) {
        rec_t r;
        rec_init(&r, f);
        char u[96];
        snprintf(u, sizeof u, "%s://127.0.0.1:%d/tls", i ? "HTTPS" : "https", f->srv.port);
        bm_xfer_req_t q = req_get(u);
        q.connect_timeout_ms = 20000; /* includes the handshake; slow under valgrind */
        r.x = bm_upstream_start(i ? up2 : f->up, &q, &rec_cbs, &r);
        assert_non_null(r.x);
        RUN_UNTIL(&f->loop, r.dones, 20000);
        assert_int_equal(r.err, BM_ETLS);
        assert_true(r.detail[0] != '\0');
        rec_dispose(&r);
    }
    bm_upstream_free(up2);
}

static void test_bad_requests(void **state)
{
    fx_t *f = *state;
    rec_t r;
    rec_init(&r, f);
    static const char *const urls[] = {"ftp://127.0.0.1/", "http://",       "http:///x",
                                       "http://host/a b",  "127.0.0.1:80/", "file:///etc/passwd",
                                       "http://:80/"};
    for (size_t i = 0; i < sizeof urls / sizeof urls[0]; i++) {
        bm_xfer_req_t q = req_get(urls[i]);
        if (bm_upstream_start(f->up, &q, &rec_cbs, &r) != NULL)
            fail_msg("accepted %s", urls[i]);
    }
    static const char *const methods[] = {"", "GE T", "G\r\nET", NULL};
    for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++) {
        bm_xfer_req_t q = req_get(url(f, "/x"));
        q.method = methods[i];
        assert_null(bm_upstream_start(f->up, &q, &rec_cbs, &r));
    }
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_hdrs_add_z(&h, "X-Evil", "a\r\nHost: evil");
    bm_xfer_req_t q = req_get(url(f, "/x"));
    q.headers = &h;
    assert_null(bm_upstream_start(f->up, &q, &rec_cbs, &r));
    bm_hdrs_clear(&h);
    bm_hdrs_add_z(&h, "Bad Name", "v");
    assert_null(bm_upstream_start(f->up, &q, &rec_cbs, &r));
    /* Stream mode without on_data, or no on_done at all. */
    q = req_get(url(f, "/x"));
    q.stream = true;
    bm_xfer_cbs_t cbs = {NULL, NULL, rec_done};
    assert_null(bm_upstream_start(f->up, &q, &cbs, &r));
    q.stream = false;
    cbs.on_done = NULL;
    assert_null(bm_upstream_start(f->up, &q, &cbs, &r));
    assert_int_equal(bm_upstream_active(f->up), 0);
    RUN_FOR(&f->loop, 20);
    assert_int_equal(r.heads + r.datas + r.dones, 0);
    assert_int_equal(f->srv.nreqs, 0);
    bm_hdrs_dispose(&h);
    rec_dispose(&r);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)
    const struct CMUnitTest tests[] = {
        T(test_get_buffered),
        T(test_post_json),
        T(test_ssz_both_ways),
        T(test_request_header_hygiene),
        T(test_big_post_no_expect_stall),
        T(test_connection_refused),
        T(test_timeout_no_answer),
        T(test_close_mid_body),
        T(test_idle_timeout_stream),
        T(test_stream_pause_resume),
        T(test_stream_pause_api),
        T(test_pause_edges),
        T(test_cancel_in_own_on_data),
        T(test_cancel_other_in_on_data),
        T(test_cancel_in_flight),
        T(test_start_from_callbacks),
        T(test_connection_reuse),
        T(test_credentials),
        T(test_too_big),
        T(test_many_concurrent),
        T(test_free_in_flight),
        T(test_free_inside_callbacks),
        T(test_interim_head_skipped),
        T(test_methods),
        T(test_no_option_leaks_between_requests),
        T(test_idle_connection_closed_by_node),
        T(test_targets_sent_verbatim),
        T(test_env_proxy_ignored),
        T(test_https_goes_through_tls),
        T(test_bad_requests),
    };
#undef T
    return cmocka_run_group_tests(tests, NULL, NULL);
}
