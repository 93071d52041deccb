/* SPDX-License-Identifier: MIT */
/*
 * upstream_fx: the fixture of the upstream tests (test_upstream, test_upstream_faults,
 * test_h1client): a scripted HTTP/1.1 server on 127.0.0.1 port 0 on the test's loop, a
 * client (bm_upstream) and a recorder of its callbacks. The server is raw libuv TCP, not
 * the project's HTTP module, so a bug shared by our server and our client cannot hide.
 * It records every request (method, target, header fields, body, connection) and answers
 * according to the target's path, so each test states its scenario in the URL it asks for:
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
 *   /continue       a 100 Continue, then the final 200
 *   /interim199     a 199 interim head (unassigned), then a 200
 *   /switch         101 Switching Protocols, nobody asked for it
 *   /head           200 with Content-Length: 10 and no body (for HEAD)
 *   /bye            200, then the server closes the (keep-alive) connection
 *   /midhead        half a head, then the server closes
 *   /chunklie?c=C   chunked, the first chunk's size a lie: C=short says 5 and sends 11 bytes,
 *                   C=long says 0x40 and sends 5, then closes
 *   /longhead?kb=N  a 200 whose head carries N KiB of fields
 *   /fold           a field continued on the next line (obs-fold)
 *   /ctlvalue       a field value that starts with a control byte
 *   /nocontent      204 with a Content-Length that must be ignored
 *   /closedelim     a body without length, delimited by the server's close
 *   /trailers       chunked with trailer fields
 *   /reset          the server resets the connection instead of answering
 *   /reset-reused   resets when the connection served a request before, else answers 200
 *   /badlength?v=N  a 200 whose Content-Length is bad_lengths[N] (cannot be), "{}", the close
 *   /early413?close=C  413 as soon as the head arrived, before the body is read; then
 *                   (C=1) the server closes with the body unread, or (C=0) reads the body
 *                   to its end and closes
 *   anything else   200, the target as body
 * A request that does not start with a capital letter (a TLS ClientHello) gets a raw 400.
 *
 * The client's transport for http:// is chosen by g_via_curl (the test binaries run
 * their tests once per transport). Static functions only; each test binary includes
 * this once.
 */
#ifndef BM_TEST_UPSTREAM_FX_H
#define BM_TEST_UPSTREAM_FX_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/hdrs.h"
#include "base/list.h"
#include "base/log.h"
#include "http/upstream.h"

/* ---- loop helpers ------------------------------------------------------------------------- */

#include "loop_guard.h"

/* Whether http:// goes through libcurl (true) or the native client (false). */
static bool g_via_curl;

static inline int use_native(void **state)
{
    (void)state;
    g_via_curl = false;
    return 0;
}

static inline int use_curl(void **state)
{
    (void)state;
    g_via_curl = true;
    return 0;
}

/* Client options for the transport under test. */
static inline void fx_opts(bm_upstream_opts_t *o)
{
    bm_upstream_opts_default(o);
    o->http_via_curl = g_via_curl;
}

static inline void free_handle(uv_handle_t *h)
{
    free(h->data == NULL ? (void *)h : h->data);
}

typedef struct later {
    uv_timer_t t;
    void (*fn)(void *);
    void *arg;
} later_t;

static inline void on_later(uv_timer_t *t)
{
    later_t *l = t->data;
    l->fn(l->arg);
    uv_close((uv_handle_t *)&l->t, free_handle);
}

/* Calls fn(arg) once after `ms`. */
static inline void after(uv_loop_t *loop, uint64_t ms, void (*fn)(void *), void *arg)
{
    later_t *l = calloc(1, sizeof *l);
    assert_non_null(l);
    l->fn = fn;
    l->arg = arg;
    uv_timer_init(loop, &l->t);
    l->t.data = l;
    uv_timer_start(&l->t, on_later, ms, 0);
}

static inline unsigned char pat(size_t i)
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
    uint64_t longest_wait_ms; /* longest silence of the client while sending it (loop time) */
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
    int served;               /* requests answered on this connection before */
    size_t discard;           /* request body bytes still to read and drop (/early413) */
    bool end_after_discard;   /* close once they are dropped */
    uint64_t last_in_ms;      /* loop time of the last read */
    uint64_t longest_wait_ms; /* longest gap between reads of the request under way */
    bm_link_t link;           /* on the server's list of open connections */
} sconn_t;

struct srv {
    uv_loop_t *loop;
    uv_tcp_t listener;
    int port;
    int accepts;
    int eofs;     /* connections the client closed */
    int open_now; /* connections open at the moment, and the most at once */
    int max_open;
    sreq_t reqs[MAX_REQS];
    int nreqs;
    bm_link_t conns; /* open connections (sconn_t.link) */
};

static inline void conn_closed(uv_handle_t *h)
{
    sconn_t *c = h->data;
    if (--c->handles == 0) {
        free(c->in);
        free(c);
    }
}

/* Takes an open connection off the server's books: false when it was closed already. */
static inline bool sconn_forget(sconn_t *c)
{
    if (c->closed)
        return false;
    c->closed = true;
    c->srv->open_now--;
    bm_link_unlink(&c->link);
    return true;
}

static inline void sconn_close(sconn_t *c)
{
    if (!sconn_forget(c))
        return;
    uv_close((uv_handle_t *)&c->tcp, conn_closed);
    uv_close((uv_handle_t *)&c->timer, conn_closed);
}

/* Closes with a reset (RST) instead of a FIN. */
static inline void sconn_reset(sconn_t *c)
{
    if (!sconn_forget(c))
        return;
    if (uv_tcp_close_reset(&c->tcp, conn_closed) != 0)
        uv_close((uv_handle_t *)&c->tcp, conn_closed);
    uv_close((uv_handle_t *)&c->timer, conn_closed);
}

typedef struct wreq {
    uv_write_t w;
    char data[];
} wreq_t;

static inline void on_written(uv_write_t *w, int status)
{
    (void)status;
    free(w->data);
}

static inline void sconn_write(sconn_t *c, const void *p, size_t n)
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

static inline void sconn_printf(sconn_t *c, const char *fmt, ...)
{
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    assert_true(n > 0 && (size_t)n < sizeof buf);
    sconn_write(c, buf, (size_t)n);
}

static inline void on_shutdown(uv_shutdown_t *r, int status)
{
    (void)status;
    sconn_close(r->data);
    free(r);
}

/* Closes after everything written so far has gone out. */
static inline void sconn_end(sconn_t *c)
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

static inline void send_chunk(sconn_t *c)
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

static inline void on_stream_tick(uv_timer_t *t)
{
    sconn_t *c = t->data;
    send_chunk(c);
    if (c->left > 0 && --c->left == 0) {
        uv_timer_stop(t);
        sconn_printf(c, "0\r\nX-Trailer: t\r\n\r\n"); /* trailers are not head fields */
    }
}

static inline void respond(sconn_t *c, const char *head_fields, const void *body, size_t n)
{
    sconn_printf(c, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n%s\r\n", n, head_fields);
    sconn_write(c, body, n);
}

static const unsigned char ssz_reply[] = {0x00, 0x01, 0x00, 0xff, 0x00, 0x00, 0x7f, 0x80, 0x00};

static inline void handle_faults(srv_t *s, sconn_t *c, sreq_t *r);

/* The framing fields of /badlength?v=N: none can describe a body, so each fails the transfer. */
static const char *const bad_lengths[] = {
    "Content-Length: 99999999999999999999\r\n", /* past 2^64 */
    "Content-Length: 9223372036854775808\r\n",  /* past 2^63 - 1 */
    "Content-Length: 12x\r\n",
    "Content-Length: -1\r\n",
    "Content-Length: +2\r\n",
    "Content-Length: 1 2\r\n",
    "Content-Length: 0x2\r\n",
    "Content-Length: 2, 2\r\n",
    "Content-Length: 2\r\nContent-Length: 3\r\n",
    "Content-Length: 2\r\nContent-Length: 2\r\n",
    "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n",
};

static inline void handle(srv_t *s, sconn_t *c, sreq_t *r)
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
        handle_faults(s, c, r);
    }
}

/* The scripts of unusual and broken answers. */
static inline void handle_faults(srv_t *s, sconn_t *c, sreq_t *r)
{
    (void)s;
    const char *t = r->target;
    if (strcmp(t, "/continue") == 0) {
        sconn_printf(c, "HTTP/1.1 100 Continue\r\n\r\n"
                        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    } else if (strcmp(t, "/interim199") == 0) {
        sconn_printf(c, "HTTP/1.1 199 Whatever\r\n\r\n"
                        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    } else if (strcmp(t, "/switch") == 0) {
        sconn_printf(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n"
                        "Connection: Upgrade\r\n\r\n");
    } else if (strcmp(t, "/midhead") == 0) {
        sconn_printf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Len");
        sconn_end(c);
    } else if (strcmp(t, "/chunklie?c=short") == 0) {
        sconn_printf(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                        "5\r\nhello world\r\n0\r\n\r\n");
    } else if (strcmp(t, "/chunklie?c=long") == 0) {
        sconn_printf(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                        "40\r\nhello\r\n0\r\n\r\n");
        sconn_end(c);
    } else if (strncmp(t, "/longhead?kb=", 13) == 0) {
        int kb = atoi(t + 13);
        sconn_printf(c, "HTTP/1.1 200 OK\r\n");
        char line[1024];
        for (int i = 0; i < kb; i++) {
            int n = snprintf(line, sizeof line, "X-Pad-%04d: ", i);
            memset(line + n, 'a', sizeof line - (size_t)n - 2);
            memcpy(line + sizeof line - 2, "\r\n", 2);
            sconn_write(c, line, sizeof line);
        }
        sconn_printf(c, "Content-Length: 2\r\n\r\nok");
    } else if (strcmp(t, "/ctlvalue") == 0) {
        static const char head[] = "HTTP/1.1 200 OK\r\nX-A: \001ab\r\nContent-Length: 2\r\n\r\nok";
        sconn_write(c, head, sizeof head - 1);
    } else if (strcmp(t, "/fold") == 0) {
        sconn_printf(c, "HTTP/1.1 200 OK\r\nX-Fold: a\r\n   b\r\nContent-Length: 2\r\n\r\nok");
    } else if (strcmp(t, "/nocontent") == 0) {
        sconn_printf(c, "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\nX-N: 1\r\n\r\n");
    } else if (strcmp(t, "/closedelim") == 0) {
        sconn_printf(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nuntil the close");
        sconn_end(c);
    } else if (strcmp(t, "/trailers") == 0) {
        sconn_printf(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n"
                        "3\r\nabc\r\n0\r\nX-Sum: 42\r\n\r\n");
    } else if (strcmp(t, "/reset") == 0) {
        sconn_reset(c);
    } else if (strcmp(t, "/reset-reused") == 0) {
        if (c->served > 0)
            sconn_reset(c);
        else
            respond(c, "", "fresh", 5);
    } else if (strncmp(t, "/badlength?v=", 13) == 0) {
        /* a Content-Length that cannot be, from bad_lengths[], a body of two bytes, the close */
        int v = atoi(t + 13);
        sconn_printf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n%s\r\n{}",
                     bad_lengths[v]);
        sconn_end(c);
    } else if (strncmp(t, "/early413?close=", 16) == 0) {
        sconn_printf(c, "HTTP/1.1 413 Payload Too Large\r\nContent-Length: 5\r\n"
                        "Connection: close\r\n\r\nlarge");
        if (t[16] == '1')
            sconn_close(c); /* the body unread: the kernel answers it with a reset */
        else
            c->end_after_discard = true;
    } else {
        respond(c, "", t, strlen(t));
    }
}

/* Records the request whose head is c->in[0..head_len) with `body_len` body bytes after it. */
static inline sreq_t *record_request(sconn_t *c, size_t head_len, size_t body_len)
{
    srv_t *s = c->srv;
    assert_true(s->nreqs < MAX_REQS);
    sreq_t *r = &s->reqs[s->nreqs++];
    bm_hdrs_init(&r->h);
    r->conn_id = c->id;
    r->longest_wait_ms = c->longest_wait_ms;
    c->longest_wait_ms = 0;
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
    return r;
}

static inline void consume(sconn_t *c, size_t n)
{
    memmove(c->in, c->in + n, c->in_len - n);
    c->in_len -= n;
}

/* Parses complete requests from the connection's input and answers them. */
static inline void parse_input(sconn_t *c)
{
    srv_t *s = c->srv;
    while (!c->closed && c->in_len > 0) {
        if (c->discard) {
            size_t n = c->discard < c->in_len ? c->discard : c->in_len;
            consume(c, n);
            c->discard -= n;
            if (c->discard == 0 && c->end_after_discard)
                sconn_end(c);
            continue;
        }
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
        if (memmem(c->in, head_len, " /early413?", 11)) {
            /* answered at the head: the body is read (and dropped) afterwards, if at all */
            sreq_t *r = record_request(c, head_len, 0);
            consume(c, head_len);
            c->discard = body_len;
            handle(s, c, r);
            c->served++;
            continue;
        }
        if (c->in_len < head_len + body_len)
            return;
        sreq_t *r = record_request(c, head_len, body_len);
        consume(c, head_len + body_len);
        handle(s, c, r);
        c->served++;
    }
}

static inline void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    (void)h;
    b->base = malloc(suggested);
    b->len = b->base ? suggested : 0;
}

static inline void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *b)
{
    sconn_t *c = st->data;
    if (nread < 0) {
        c->srv->eofs++;
        sconn_close(c);
    } else if (nread > 0) {
        uint64_t now = uv_now(c->srv->loop);
        if (c->in_len > 0 && now - c->last_in_ms > c->longest_wait_ms)
            c->longest_wait_ms = now - c->last_in_ms; /* part of a request came before */
        c->last_in_ms = now;
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

static inline void on_accept(uv_stream_t *l, int status)
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
    bm_list_push_front(&s->conns, &c->link);
    if (++s->open_now > s->max_open)
        s->max_open = s->open_now;
    if (uv_accept(l, (uv_stream_t *)&c->tcp) != 0) {
        sconn_close(c);
        return;
    }
    c->id = ++s->accepts;
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

static inline void srv_start(srv_t *s, uv_loop_t *loop)
{
    memset(s, 0, sizeof *s);
    s->loop = loop;
    bm_link_init(&s->conns);
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

static inline void srv_close(srv_t *s)
{
    while (!bm_list_empty(&s->conns))
        sconn_close(bm_list_first(&s->conns, sconn_t, link));
    uv_close((uv_handle_t *)&s->listener, NULL);
    for (int i = 0; i < s->nreqs; i++) {
        bm_hdrs_dispose(&s->reqs[i].h);
        bm_str_dispose(&s->reqs[i].body);
    }
}

/* Number of fields named `name` in a recorded request. */
static inline int count_fields(const sreq_t *r, const char *name)
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
static inline const char *url(fx_t *f, const char *path)
{
    snprintf(g_url, sizeof g_url, "%s%.900s", f->base, path);
    return g_url;
}

static inline int fx_setup(void **state)
{
    /* as beaconmux does: a write to a connection the peer reset must not kill the test */
    signal(SIGPIPE, SIG_IGN);
    fx_t *f = calloc(1, sizeof *f);
    assert_non_null(f);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    srv_start(&f->srv, &f->loop);
    snprintf(f->base, sizeof f->base, "http://127.0.0.1:%d", f->srv.port);
    bm_upstream_opts_t o;
    fx_opts(&o);
    f->up = bm_upstream_new(&f->loop, &o);
    assert_non_null(f->up);
    *state = f;
    return 0;
}

static inline void on_drain_guard(uv_timer_t *t)
{
    uv_stop(t->loop);
}

static inline int fx_teardown(void **state)
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

static inline void rec_init(rec_t *r, fx_t *f)
{
    memset(r, 0, sizeof *r);
    r->f = f;
    r->err = 1; /* not done */
    bm_hdrs_init(&r->hdrs);
}

static inline void rec_dispose(rec_t *r)
{
    bm_buf_unref(r->body);
    bm_hdrs_dispose(&r->hdrs);
    bm_str_dispose(&r->data);
}

static inline void rec_head(bm_xfer_t *x, int status, const bm_hdrs_t *h, void *ud)
{
    rec_t *r = ud;
    assert_ptr_equal(x, r->x);
    assert_non_null(h);
    r->heads++;
    r->head_status = status;
    if (r->head_hook)
        r->head_hook(r);
}

static inline void resume_later(void *arg)
{
    rec_t *r = arg;
    r->paused = false;
    bm_upstream_resume(r->x);
}

static inline int rec_data(bm_xfer_t *x, const char *p, size_t n, void *ud)
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

static inline void rec_done(bm_xfer_t *x, const bm_xfer_result_t *res, void *ud)
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

static inline bm_xfer_req_t req_get(const char *u)
{
    bm_xfer_req_t q;
    memset(&q, 0, sizeof q);
    q.method = "GET";
    q.url = u;
    return q;
}

static inline bm_xfer_t *start(fx_t *f, rec_t *r, const bm_xfer_req_t *q)
{
    r->x = bm_upstream_start(f->up, q, &rec_cbs, r);
    return r->x;
}

/* Initialises h with the fields of a list of {name, value} pairs ended by {NULL}. */
static inline void hdrs_of(bm_hdrs_t *h, const char *const nv[][2])
{
    bm_hdrs_init(h);
    for (; nv[0][0] != NULL; nv++)
        bm_hdrs_add_z(h, nv[0][0], nv[0][1]);
}

/* Starts n transfers of `path` at once, r[i] the record of the i-th. */
static inline void start_burst(fx_t *f, rec_t *r, int n, const char *path)
{
    for (int i = 0; i < n; i++) {
        rec_init(&r[i], f);
        bm_xfer_req_t q = req_get(url(f, path));
        assert_non_null(start(f, &r[i], &q));
    }
}

/* How many of the n transfers recorded in r have ended. */
static inline int dones_of(const rec_t *r, int n)
{
    int sum = 0;
    for (int i = 0; i < n; i++)
        sum += r[i].dones;
    return sum;
}

/* Starts q with r as its record and runs the loop until the transfer ended (at most `ms`:
 * a transfer still running then fails the test's next assertion on r). */
static inline void start_and_finish(fx_t *f, rec_t *r, const bm_xfer_req_t *q, uint64_t ms)
{
    assert_non_null(start(f, r, q));
    RUN_UNTIL(&f->loop, r->dones, ms);
}

static inline bool body_is(const rec_t *r, const void *p, size_t n)
{
    return r->body && r->body->len == n && memcmp(r->body->data, p, n) == 0;
}

/* A loopback port nobody listens on (bound, read, closed). */
static inline int closed_port(uv_loop_t *loop)
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

/* A buffered body of the /stream pattern, n bytes. */
static inline void check_pattern_body(const rec_t *r, size_t n)
{
    assert_non_null(r->body);
    assert_int_equal(r->body->len, n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal((unsigned char)r->body->data[i], pat(i));
}

static inline void check_pattern(const rec_t *r, size_t n)
{
    assert_int_equal(bm_str_len(&r->data), n);
    const unsigned char *d = (const unsigned char *)bm_str_data(&r->data);
    for (size_t i = 0; i < n; i++)
        if (d[i] != pat(i))
            fail_msg("byte %zu is %u, want %u", i, d[i], pat(i));
}

/* Runs one request to completion and returns its error code (the record is disposed). */
static inline int run_one(fx_t *f, const bm_xfer_req_t *q, size_t *body_len)
{
    rec_t r;
    rec_init(&r, f);
    start_and_finish(f, &r, q, 5000);
    assert_int_equal(r.dones, 1);
    int err = r.err;
    if (body_len)
        *body_len = r.body ? r.body->len : (size_t)-1;
    rec_dispose(&r);
    return err;
}

#endif /* BM_TEST_UPSTREAM_FX_H */
