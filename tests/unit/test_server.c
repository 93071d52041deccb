/* SPDX-License-Identifier: MIT */
/*
 * test_server: the HTTP server on real loopback sockets. The server runs on a loop in
 * the test's main thread; each test's client runs in a second thread with plain blocking
 * sockets (every receive bounded by SO_RCVTIMEO) and parses responses with http-parser,
 * independently of our own request parser. The threads wait for each other only on
 * semaphores and on the sockets themselves, with bounds, never on sleeps. Client-side
 * failures are recorded as text and asserted from the main thread after the join; every
 * test ends with a graceful shutdown and uv_loop_close() == 0.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <http_parser.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/log.h"
#include "client_thread.h"
#include "http/server.h"
#include "loop_guard.h"

#define BOUND_MS 10000 /* every wait in a test ends within this, or the test fails */

/* ---- fixture: a server on a loop, a client in a thread --------------------------------- */

typedef struct fx fx_t;
typedef void (*client_fn)(fx_t *f);

struct fx {
    uv_loop_t loop;
    bm_server_t *srv;
    int port;
    uv_timer_t t1; /* used by handlers that answer later */
    client_thread_t ct;
    client_fn client;
    bool timed_out; /* a wait of the loop passed its bound (reported by fx_finish) */
    bool shut_down; /* the test itself called bm_server_shutdown */
    bool done_called;

    /* what the server side saw */
    atomic_int handled;
    int abort_count;
    int drain_count;
    int in_flight, max_in_flight;
    bool in_end;                /* a handler is inside bm_resp_send of an earlier request */
    int nested_calls;           /* handler calls made from inside such a call */
    bool flag;                  /* a per-test condition the loop runs until */
    bm_req_t *held;             /* a request a handler keeps */
    int stream_step;            /* /stream: pieces written */
    bool was_unwritable;        /* /big */
    size_t big_written;         /* /big */
    bm_buf_t *big_piece;        /* /big */
    int gone_start_rc;          /* /slow: bm_resp_start after the client left */
    int gone_write_rc;          /* /slow: bm_resp_write_copy after the client left */
    bool gone_seen;             /* /slow: bm_req_client_gone() was true */
    size_t conns_at_second;     /* keep-alive: connections open at the second request */
    uint64_t unwritable_at_ms;  /* /nonreader: when the server could not write any more */
    uint64_t abort_at_ms;       /* /nonreader: when the client was cut */
    uint64_t tick_ms;           /* /nonreader: the previous tick */
    size_t queued_after_tick;   /* /nonreader: bytes queued when the previous tick ended */
    uint64_t progress_after_ms; /* /nonreader: the server's last progress came after this */
    bm_req_t *holds[4];         /* /hold?k=<i>: held until all four are */
    int nheld;
    int release_order[4]; /* the order the four holds are answered in, in one go */
    int after_order[4];   /* /after?k=<i>: the order the handler saw them in */
    int nafter;
};

static void run_client(void *arg)
{
    fx_t *f = arg;
    f->client(f);
}

/* In the client thread: record the first failed expectation and stop the client. */
#define CHECK(f, cond) CT_CHECK(&(f)->ct, cond)

static void handler(bm_req_t *req, void *ud);

static void fx_start(fx_t *f, const bm_server_opts_t *opts, client_fn client)
{
    memset(f, 0, sizeof *f);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    bm_server_opts_t o;
    bm_server_opts_default(&o);
    f->srv = bm_server_new(&f->loop, opts ? opts : &o, handler, f);
    assert_non_null(f->srv);
    assert_int_equal(bm_server_listen(f->srv, "127.0.0.1", 0), 0);
    f->port = bm_server_port(f->srv);
    assert_true(f->port > 0);
    uv_timer_init(&f->loop, &f->t1);
    f->t1.data = f;
    f->client = client;
    ct_start(&f->ct, &f->loop, run_client, f);
}

/* Runs the loop until *flag, with a bound. A miss is only remembered: fx_finish reports it
 * once the client thread was let go (failing here would leave the thread running). */
static void fx_run_until(fx_t *f, bool *flag)
{
    if (f->timed_out)
        return;
    RUN_UNTIL(&f->loop, *flag, BOUND_MS);
    if (!*flag)
        f->timed_out = true;
}

static void on_server_done(bm_server_t *srv, void *ud)
{
    fx_t *f = ud;
    assert_false(f->done_called);
    f->done_called = true;
}

static void fx_finish(fx_t *f)
{
    fx_run_until(f, &f->ct.done);
    ct_join(&f->ct); /* lets a waiting client go, then reports */
    assert_false(f->timed_out);
    if (!f->shut_down)
        bm_server_shutdown(f->srv, 0, on_server_done, f);
    fx_run_until(f, &f->done_called);
    assert_true(f->done_called);
    assert_int_equal(bm_server_connection_count(f->srv), 0);
    bm_server_free(f->srv);
    if (f->big_piece)
        bm_buf_unref(f->big_piece);
    ct_close(&f->ct);
    uv_close((uv_handle_t *)&f->t1, NULL);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
}

/* Client side: wait (bounded) for the loop to post the semaphore. */
static bool fx_wait(fx_t *f)
{
    return ct_wait(&f->ct, BOUND_MS);
}

/* ---- the client: blocking sockets and an http-parser response reader ------------------- */

typedef struct client {
    int fd;
    char buf[64 * 1024];
    size_t off, len;
    http_parser hp;
    http_parser_settings st;
    bool head_req; /* the next response answers a HEAD */
    /* the last response */
    int status;
    bm_str_t hdrs; /* "\nname: value" per field, names lowercased */
    bm_str_t body;
    bool done;
    bool last_was_value;
    bool keep_alive;
} client_t;

static int cb_field(http_parser *p, const char *at, size_t n)
{
    client_t *c = p->data;
    if (c->last_was_value || bm_str_len(&c->hdrs) == 0)
        bm_str_putc(&c->hdrs, '\n');
    for (size_t i = 0; i < n; i++)
        bm_str_putc(&c->hdrs, (char)(at[i] >= 'A' && at[i] <= 'Z' ? at[i] + 32 : at[i]));
    c->last_was_value = false;
    return 0;
}

static int cb_value(http_parser *p, const char *at, size_t n)
{
    client_t *c = p->data;
    if (!c->last_was_value)
        bm_str_puts(&c->hdrs, ": ");
    if (n)
        bm_str_append(&c->hdrs, at, n);
    c->last_was_value = true;
    return 0;
}

static int cb_headers_complete(http_parser *p)
{
    client_t *c = p->data;
    c->status = p->status_code;
    bm_str_putc(&c->hdrs, '\n');
    return c->head_req ? 1 : 0;
}

static int cb_body(http_parser *p, const char *at, size_t n)
{
    client_t *c = p->data;
    bm_str_append(&c->body, at, n);
    return 0;
}

static int cb_complete(http_parser *p)
{
    client_t *c = p->data;
    c->done = true;
    c->keep_alive = http_should_keep_alive(p);
    http_parser_pause(p, 1);
    return 0;
}

static int cl_connect(client_t *c, int port, int rcvbuf)
{
    memset(c, 0, sizeof *c);
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (c->fd < 0)
        return -1;
    struct timeval tv = {BOUND_MS / 1000, 0};
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (rcvbuf > 0)
        setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        int e = errno;
        close(c->fd);
        c->fd = -1;
        return -e;
    }
    http_parser_settings_init(&c->st);
    c->st.on_header_field = cb_field;
    c->st.on_header_value = cb_value;
    c->st.on_headers_complete = cb_headers_complete;
    c->st.on_body = cb_body;
    c->st.on_message_complete = cb_complete;
    return 0;
}

static void cl_close(client_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    bm_str_dispose(&c->hdrs);
    bm_str_dispose(&c->body);
}

static bool cl_send(client_t *c, const void *p, size_t n)
{
    const char *s = p;
    while (n > 0) {
        ssize_t w = send(c->fd, s, n, MSG_NOSIGNAL);
        if (w <= 0)
            return false;
        s += w;
        n -= (size_t)w;
    }
    return true;
}

static bool cl_send_z(client_t *c, const char *z)
{
    return cl_send(c, z, strlen(z));
}

/* Reads one response (0), or fails: -1 parse error, -2 EOF before its end, -3 timeout. */
static int cl_read(client_t *c)
{
    http_parser_init(&c->hp, HTTP_RESPONSE);
    c->hp.data = c;
    c->status = 0;
    c->done = false;
    c->last_was_value = false;
    bm_str_clear(&c->hdrs);
    bm_str_clear(&c->body);
    for (;;) {
        if (c->off < c->len) {
            size_t n = http_parser_execute(&c->hp, &c->st, c->buf + c->off, c->len - c->off);
            c->off += n;
            if (c->done) {
                c->head_req = false;
                return 0;
            }
            if (HTTP_PARSER_ERRNO(&c->hp) != HPE_OK)
                return -1;
            continue;
        }
        c->off = c->len = 0;
        ssize_t r = recv(c->fd, c->buf, sizeof c->buf, 0);
        if (r > 0) {
            c->len = (size_t)r;
            continue;
        }
        if (r == 0) {
            http_parser_execute(&c->hp, &c->st, NULL, 0); /* bodies delimited by the close */
            c->head_req = false;
            return c->done ? 0 : -2;
        }
        return -3;
    }
}

/* The value of a response header (lowercase name), copied into out; false when absent. */
static bool cl_header(client_t *c, const char *name, char *out, size_t outlen)
{
    char key[128];
    snprintf(key, sizeof key, "\n%s: ", name);
    const char *h = strstr(bm_str_data(&c->hdrs), key);
    if (!h)
        return false;
    h += strlen(key);
    size_t n = strcspn(h, "\n");
    if (n >= outlen)
        n = outlen - 1;
    memcpy(out, h, n);
    out[n] = '\0';
    return true;
}

static bool cl_header_is(client_t *c, const char *name, const char *want)
{
    char v[256];
    return cl_header(c, name, v, sizeof v) && strcmp(v, want) == 0;
}

/* True when the server closed the connection (bounded wait; data first is a failure). */
static bool cl_eof(client_t *c)
{
    if (c->off < c->len)
        return false;
    char b[256];
    ssize_t r = recv(c->fd, b, sizeof b, 0);
    return r == 0 || (r < 0 && errno == ECONNRESET);
}

static bool body_is(client_t *c, const char *want)
{
    return bm_str_len(&c->body) == strlen(want) && strcmp(bm_str_data(&c->body), want) == 0;
}

/* The body is the Beacon API error shape for `code`. */
static bool is_json_error(client_t *c, int code)
{
    char prefix[64];
    snprintf(prefix, sizeof prefix, "{\"code\":%d,\"message\":\"", code);
    const char *b = bm_str_data(&c->body);
    size_t n = bm_str_len(&c->body);
    return c->status == code && cl_header_is(c, "content-type", "application/json") &&
           strncmp(b, prefix, strlen(prefix)) == 0 && n > strlen(prefix) + 2 &&
           strcmp(b + n - 2, "\"}") == 0;
}

/* ---- the handler: one per path ----------------------------------------------------------- */

static const char hello[] = "{\"data\":{\"health\":\"ok\"}}";

static void stream_tick(uv_timer_t *t)
{
    fx_t *f = t->data;
    static const char *pieces[] = {"alpha,", "beta,", "gamma"};
    bm_resp_write_copy(f->held, pieces[f->stream_step], strlen(pieces[f->stream_step]));
    if (++f->stream_step == 3) {
        uv_timer_stop(t);
        bm_resp_end(f->held);
        f->held = NULL;
    }
}

typedef struct later {
    uv_timer_t t;
    bm_req_t *req;
    fx_t *f;
} later_t;

static void later_closed(uv_handle_t *h)
{
    free(h->data);
}

static void later_fire(uv_timer_t *t)
{
    later_t *l = t->data;
    l->f->in_flight--;
    bm_buf_t *b = bm_buf_from_str(bm_req_target(l->req));
    l->f->in_end = true;
    bm_resp_send(l->req, 200, "text/plain", b, NULL);
    l->f->in_end = false;
    bm_buf_unref(b);
    uv_close((uv_handle_t *)&l->t, later_closed);
}

static void slow_end(uv_timer_t *t)
{
    fx_t *f = t->data;
    bm_req_t *req = f->held;
    f->gone_seen = bm_req_client_gone(req);
    f->gone_start_rc = bm_resp_start(req, 200, NULL, 5);
    f->gone_write_rc = bm_resp_write_copy(req, "hello", 5);
    bm_resp_end(req);
    f->held = NULL;
    f->flag = true;
}

static void slow_abort(bm_req_t *req, void *ud)
{
    fx_t *f = ud;
    f->abort_count++;
    uv_timer_start(&f->t1, slow_end, 20, 0);
}

static void big_drain(bm_req_t *req, void *ud)
{
    fx_t *f = ud;
    f->drain_count++;
    bm_resp_write_copy(req, "END", 3);
    bm_resp_end(req);
    f->held = NULL;
}

/* The client of /nonreader was cut: end the request and tell the client thread. */
static void nonreader_abort(bm_req_t *req, void *ud)
{
    fx_t *f = ud;
    f->abort_count++;
    f->abort_at_ms = uv_now(&f->loop);
    uv_timer_stop(&f->t1);
    bm_resp_end(req);
    f->held = NULL;
    f->flag = true;
    sem_post(&f->ct.sem);
}

/* Keeps the client of /nonreader's queue full, so that the kernel ends up holding all it
 * will (its buffers may grow for a while: a queue that was full once may drain again, and
 * with nothing left unsent the server has no send deadline). The first tick that finds
 * bytes still queued tells the client thread. A tick that finds fewer bytes queued than
 * the previous one left saw the server make progress after that tick (which pushes its
 * send deadline): the lower bound of the cut, whatever the scheduler did meanwhile. */
static void nonreader_tick(uv_timer_t *t)
{
    fx_t *f = t->data;
    bm_req_t *req = f->held;
    size_t queued = bm_resp_pending_bytes(req);
    if (queued < f->queued_after_tick)
        f->progress_after_ms = f->tick_ms;
    if (queued > 0 && !f->was_unwritable) {
        f->was_unwritable = true;
        f->unwritable_at_ms = uv_now(&f->loop);
        sem_post(&f->ct.sem);
    }
    while (bm_resp_writable(req))
        bm_resp_write(req, f->big_piece);
    f->queued_after_tick = bm_resp_pending_bytes(req);
    f->tick_ms = uv_now(&f->loop);
}

static void big_tick(uv_timer_t *t)
{
    fx_t *f = t->data;
    bm_req_t *req = f->held;
    while (bm_resp_writable(req) && f->big_written < 256u * 1024 * 1024) {
        bm_resp_write(req, f->big_piece);
        f->big_written += f->big_piece->len;
    }
    if (!bm_resp_writable(req) && bm_resp_pending_bytes(req) > 64 * 1024) {
        /* Queued and not flushed yet counts too; wait for a flush to prove the kernel is
         * full: only stop once a tick starts with the queue still above high water. */
        if (f->stream_step++ > 0) {
            uv_timer_stop(t);
            f->was_unwritable = true;
            f->unwritable_at_ms = uv_now(&f->loop);
            bm_resp_on_drain(req, big_drain, f);
            sem_post(&f->ct.sem);
        }
    } else {
        f->stream_step = 0;
    }
}

static void shutdown_answer(uv_timer_t *t)
{
    fx_t *f = t->data;
    bm_buf_t *b = bm_buf_from_str("finished");
    bm_resp_send(f->held, 200, "text/plain", b, NULL);
    bm_buf_unref(b);
    f->held = NULL;
}

/* Answers the four held requests one after the other, in one loop iteration. */
static void release_holds(uv_timer_t *t)
{
    fx_t *f = t->data;
    for (int i = 0; i < 4; i++) {
        int k = f->release_order[i];
        bm_buf_t *b = bm_buf_from_str("held");
        bm_resp_send(f->holds[k], 200, "text/plain", b, NULL);
        bm_buf_unref(b);
        f->holds[k] = NULL;
    }
}

/* ?k=<0-3> */
static int query_k(bm_req_t *req)
{
    size_t ql;
    const char *q = bm_req_query(req, &ql);
    int k = q && ql == 3 && q[0] == 'k' && q[1] == '=' ? q[2] - '0' : -1;
    return k >= 0 && k < 4 ? k : -1;
}

static void handler(bm_req_t *req, void *ud)
{
    fx_t *f = ud;
    f->handled++;
    if (f->in_end)
        f->nested_calls++;
    size_t plen;
    const char *p = bm_req_path(req, &plen);
    char path[64];
    snprintf(path, sizeof path, "%.*s", (int)(plen < 63 ? plen : 63), p);
    int k = query_k(req); /* /hold and /after */

    if (strcmp(path, "/hello") == 0) {
        bm_buf_t *b = bm_buf_from_str(hello);
        bm_resp_send(req, 200, "application/json", b, NULL);
        bm_buf_unref(b);
    } else if (strcmp(path, "/second") == 0) {
        f->conns_at_second = bm_server_connection_count(f->srv);
        bm_buf_t *b = bm_buf_from_str(hello);
        bm_resp_send(req, 200, "application/json", b, NULL);
        bm_buf_unref(b);
    } else if (strcmp(path, "/echo") == 0) {
        bm_hdrs_t h;
        bm_hdrs_init(&h);
        bm_hdrs_add_z(&h, "X-Method", bm_req_method(req));
        const char *ct = bm_req_header(req, "content-type");
        bm_hdrs_add_z(&h, "X-Content-Type", ct ? ct : "-");
        /* Hop-by-hop fields from a handler never reach the wire. */
        bm_hdrs_add_z(&h, "Transfer-Encoding", "gzip");
        bm_resp_send(req, 200, "application/octet-stream", bm_req_body(req), &h);
        bm_hdrs_dispose(&h);
    } else if (strcmp(path, "/stream") == 0) {
        f->held = req;
        f->stream_step = 0;
        bm_hdrs_t h;
        bm_hdrs_init(&h);
        bm_hdrs_add_z(&h, "Content-Type", "text/event-stream");
        assert_int_equal(bm_resp_start(req, 200, &h, -1), 0);
        bm_hdrs_dispose(&h);
        assert_true(bm_resp_started(req));
        uv_timer_start(&f->t1, stream_tick, 10, 10);
    } else if (strcmp(path, "/async") == 0) {
        /* ?d=<ms>: answer after that delay */
        size_t ql;
        const char *q = bm_req_query(req, &ql);
        int d = q && ql > 2 ? atoi(q + 2) : 0;
        later_t *l = calloc(1, sizeof *l);
        l->req = req;
        l->f = f;
        uv_timer_init(&f->loop, &l->t);
        l->t.data = l;
        uv_timer_start(&l->t, later_fire, (uint64_t)d, 0);
        if (++f->in_flight > f->max_in_flight)
            f->max_in_flight = f->in_flight;
    } else if (strcmp(path, "/hold") == 0 && k >= 0 && !f->holds[k]) {
        f->holds[k] = req;
        if (++f->nheld == 4)
            uv_timer_start(&f->t1, release_holds, 0, 0);
    } else if (strcmp(path, "/after") == 0 && k >= 0 && f->nafter < 4) {
        f->after_order[f->nafter++] = k;
        bm_buf_t *b = bm_buf_from_str("after");
        bm_resp_send(req, 200, "text/plain", b, NULL);
        bm_buf_unref(b);
    } else if (strcmp(path, "/slow") == 0) {
        f->held = req;
        bm_req_on_abort(req, slow_abort, f);
        sem_post(&f->ct.sem);
    } else if (strcmp(path, "/big") == 0) {
        f->held = req;
        f->big_piece = bm_buf_new(64 * 1024);
        memset(f->big_piece->data, 'z', 64 * 1024);
        f->big_piece->len = 64 * 1024;
        f->stream_step = 0;
        bm_resp_start(req, 200, NULL, -1);
        uv_timer_start(&f->t1, big_tick, 0, 1);
    } else if (strcmp(path, "/nonreader") == 0) {
        /* as /big, and the abort callback ends the request: the client will never read */
        f->held = req;
        f->big_piece = bm_buf_new(64 * 1024);
        memset(f->big_piece->data, 'z', 64 * 1024);
        f->big_piece->len = 64 * 1024;
        f->stream_step = 0;
        bm_req_on_abort(req, nonreader_abort, f);
        bm_resp_start(req, 200, NULL, -1);
        uv_timer_start(&f->t1, nonreader_tick, 0, 1);
    } else if (strcmp(path, "/short") == 0) {
        bm_resp_start(req, 200, NULL, 10);
        bm_resp_write_copy(req, "12345", 5);
        bm_resp_end(req);
    } else if (strcmp(path, "/abort-early") == 0) {
        bm_resp_abort(req);
    } else if (strcmp(path, "/abort-late") == 0) {
        bm_resp_start(req, 200, NULL, -1);
        bm_resp_write_copy(req, "partial", 7);
        bm_resp_abort(req);
    } else if (strcmp(path, "/shrink") == 0) {
        /* what a configuration reload does: new limits, from inside a handler */
        bm_server_opts_t o;
        bm_server_opts_default(&o);
        o.max_body_bytes = 100;
        bm_server_set_opts(f->srv, &o);
        bm_resp_send(req, 204, NULL, NULL, NULL);
    } else if (strcmp(path, "/shutdown") == 0) {
        f->held = req;
        f->shut_down = true;
        bm_server_shutdown(f->srv, BOUND_MS, on_server_done, f);
        uv_timer_start(&f->t1, shutdown_answer, 50, 0);
        sem_post(&f->ct.sem);
    } else {
        bm_resp_error(req, 404, "no route for %s", path);
    }
}

/* ---- tests ------------------------------------------------------------------------------ */

static const char get_hello[] = "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n";

static void client_keep_alive(fx_t *f)
{
    client_t c;
    CHECK(f, cl_connect(&c, f->port, 0) == 0);
    CHECK(f, cl_send_z(&c, get_hello));
    CHECK(f, cl_read(&c) == 0);
    CHECK(f, c.status == 200 && body_is(&c, hello) && c.keep_alive);
    CHECK(f, cl_header_is(&c, "content-length", "24"));
    CHECK(f, cl_header_is(&c, "content-type", "application/json"));
    char date[64];
    CHECK(f, cl_header(&c, "date", date, sizeof date));
    CHECK(f, cl_send_z(&c, "GET /second HTTP/1.1\r\nHost: t\r\n\r\n"));
    CHECK(f, cl_read(&c) == 0);
    CHECK(f, c.status == 200 && body_is(&c, hello));
    /* Connection: close from the client: answered with it, then closed. */
    CHECK(f, cl_send_z(&c, "GET /hello HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"));
    CHECK(f, cl_read(&c) == 0);
    CHECK(f, c.status == 200 && !c.keep_alive && cl_header_is(&c, "connection", "close"));
    CHECK(f, cl_eof(&c));
    cl_close(&c);
}

static void keep_alive(void **state)
{
    fx_t f;
    fx_start(&f, NULL, client_keep_alive);
    fx_finish(&f);
    assert_int_equal(f.handled, 3);
    assert_int_equal(f.conns_at_second, 1);
}

static void client_pipelining(fx_t *f)
{
    client_t c;
    CHECK(f, cl_connect(&c, f->port, 0) == 0);
    /* The first answers last if handled in parallel: order must still hold. */
    CHECK(f, cl_send_z(&c, "GET /async?d=40 HTTP/1.1\r\nHost: t\r\n\r\n"
                           "GET /async?d=20 HTTP/1.1\r\nHost: t\r\n\r\n"
                           "GET /async?d=1 HTTP/1.1\r\nHost: t\r\n\r\n"));
    CHECK(f, cl_read(&c) == 0 && c.status == 200 && body_is(&c, "/async?d=40"));
    CHECK(f, cl_read(&c) == 0 && c.status == 200 && body_is(&c, "/async?d=20"));
    CHECK(f, cl_read(&c) == 0 && c.status == 200 && body_is(&c, "/async?d=1"));
    /* Synchronous handlers: three answers in one go. */
    CHECK(f, cl_send_z(&c, "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n"
                           "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc"
                           "GET /nowhere HTTP/1.1\r\nHost: t\r\n\r\n"));
    CHECK(f, cl_read(&c) == 0 && c.status == 200 && body_is(&c, hello));
    CHECK(f, cl_read(&c) == 0 && c.status == 200 && body_is(&c, "abc"));
    CHECK(f, cl_read(&c) == 0 && is_json_error(&c, 404));
    CHECK(f, body_is(&c, "{\"code\":404,\"message\":\"no route for /nowhere\"}"));
    cl_close(&c);
}

static void pipelining_in_order(void **state)
{
    fx_t f;
    fx_start(&f, NULL, client_pipelining);
    fx_finish(&f);
    assert_int_equal(f.handled, 6);
    assert_int_equal(f.max_in_flight, 1); /* one request of a connection at a time */
    assert_int_equal(f.nested_calls, 0);  /* the next one starts from the loop */
}

static void client_completion_order(fx_t *f)
{
    client_t c[4];
    for (int i = 0; i < 4; i++)
        CHECK(f, cl_connect(&c[i], f->port, 0) == 0);
    for (int i = 0; i < 4; i++) {
        /* One send: the second request is in the server's buffer when the first is held. */
        char reqs[160];
        snprintf(reqs, sizeof reqs,
                 "GET /hold?k=%d HTTP/1.1\r\nHost: t\r\n\r\n"
                 "GET /after?k=%d HTTP/1.1\r\nHost: t\r\n\r\n",
                 i, i);
        CHECK(f, cl_send_z(&c[i], reqs));
    }
    for (int i = 0; i < 4; i++) {
        CHECK(f, cl_read(&c[i]) == 0 && c[i].status == 200 && body_is(&c[i], "held"));
        CHECK(f, cl_read(&c[i]) == 0 && c[i].status == 200 && body_is(&c[i], "after"));
        cl_close(&c[i]);
    }
}

static void answers_leave_in_completion_order(void **state)
{
    /* Answers completed in one loop iteration are written, and their connections' next
     * requests taken, in the order they completed: a queue, not a stack. A stack writes
     * the oldest answer of a busy iteration last, which showed as a proxy's p99. */
    static const int orders[][4] = {{2, 0, 3, 1}, {0, 1, 2, 3}, {3, 2, 1, 0}};
    for (size_t o = 0; o < sizeof orders / sizeof orders[0]; o++) {
        fx_t f;
        fx_start(&f, NULL, client_completion_order);
        memcpy(f.release_order, orders[o], sizeof f.release_order);
        fx_finish(&f);
        assert_int_equal(f.handled, 8);
        assert_int_equal(f.nafter, 4);
        assert_memory_equal(f.after_order, orders[o], sizeof f.after_order);
    }
}

static void client_pipelining_backpressure(fx_t *f)
{
    client_t c;
    CHECK(f, cl_connect(&c, f->port, 0) == 0);
    bm_str_t s = BM_STR_INIT;
    for (int i = 0; i < 50; i++)
        bm_str_puts(&s, "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n");
    bool ok = cl_send(&c, bm_str_data(&s), bm_str_len(&s));
    bm_str_dispose(&s);
    CHECK(f, ok);
    for (int i = 0; i < 50; i++)
        CHECK(f, cl_read(&c) == 0 && c.status == 200 && body_is(&c, hello));
    cl_close(&c);
}

static void pipelining_over_high_water(void **state)
{
    /* The answers of buffered requests pass the high-water mark: the server pauses the
     * parsing and must resume it once the queue drained, even when the kernel took
     * everything at once. */
    bm_server_opts_t o;
    bm_server_opts_default(&o);
    o.write_high_water = 1024;
    fx_t f;
    fx_start(&f, &o, client_pipelining_backpressure);
    fx_finish(&f);
    assert_int_equal(f.handled, 50);
}

static void client_chunked_request(fx_t *f)
{
    client_t c;
    CHECK(f, cl_connect(&c, f->port, 0) == 0);
    CHECK(f, cl_send_z(&c, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                           "Transfer-Encoding: chunked\r\n\r\n4;ext=1\r\n[1,2\r\n"));
    CHECK(f, cl_send_z(&c, "3\r\n,3]\r\n0\r\nX-Trailer: yes\r\n\r\n"));
    CHECK(f, cl_read(&c) == 0);
    CHECK(f, c.status == 200 && body_is(&c, "[1,2,3]"));
    CHECK(f, cl_header_is(&c, "x-method", "POST"));
    CHECK(f, cl_header_is(&c, "x-content-type", "application/json"));
    CHECK(f, cl_header_is(&c, "content-length", "7"));
    char te[32];
    CHECK(f, !cl_header(&c, "transfer-encoding", te, sizeof te));
    /* A large body in several writes, read in place. */
    size_t n = 300 * 1000;
    char *big = malloc(n);
    for (size_t i = 0; i < n; i++)
        big[i] = (char)('a' + i % 26);
    char head[128];
    snprintf(head, sizeof head, "PUT /echo HTTP/1.1\r\nHost: t\r\nContent-Length: %zu\r\n\r\n", n);
    bool ok = cl_send_z(&c, head) && cl_send(&c, big, 1000) && cl_send(&c, big + 1000, n - 1000);
    ok = ok && cl_read(&c) == 0 && c.status == 200 && bm_str_len(&c.body) == n &&
         memcmp(bm_str_data(&c.body), big, n) == 0;
    free(big);
    CHECK(f, ok);
    cl_close(&c);
}

static void chunked_request_body(void **state)
{
    fx_t f;
    fx_start(&f, NULL, client_chunked_request);
    fx_finish(&f);
}

static void client_expect(fx_t *f)
{
    client_t c;
    CHECK(f, cl_connect(&c, f->port, 0) == 0);
    CHECK(f, cl_send_z(&c, "POST /echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
                           "Content-Length: 5\r\n\r\n"));
    CHECK(f, cl_read(&c) == 0 && c.status == 100);
    CHECK(f, cl_send_z(&c, "hello"));
    CHECK(f, cl_read(&c) == 0 && c.status == 200 && body_is(&c, "hello"));
    /* Over the body limit: 413 at once, no 100, and the connection closes. */
    CHECK(f, cl_send_z(&c, "POST /echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
                           "Content-Length: 2000\r\n\r\n"));
    CHECK(f, cl_read(&c) == 0 && is_json_error(&c, 413));
    CHECK(f, cl_header_is(&c, "connection", "close"));
    CHECK(f, cl_eof(&c));
    cl_close(&c);
}

static void expect_continue(void **state)
{
    bm_server_opts_t o;
    bm_server_opts_default(&o);
    o.max_body_bytes = 1000;
    fx_t f;
    fx_start(&f, &o, client_expect);
    fx_finish(&f);
    assert_int_equal(f.handled, 1);
}

static void client_stream(fx_t *f)
{
    client_t c;
    CHECK(f, cl_connect(&c, f->port, 0) == 0);
    CHECK(f, cl_send_z(&c, "GET /stream HTTP/1.1\r\nHost: t\r\n\r\n"));
    CHECK(f, cl_read(&c) == 0);
    CHECK(f, c.status == 200 && cl_header_is(&c, "transfer-encoding", "chunked"));
    CHECK(f, cl_header_is(&c, "content-type", "text/event-stream"));
    CHECK(f, body_is(&c, "alpha,beta,gamma") && c.keep_alive);
    /* HTTP/1.0 has no chunked encoding: the body ends with the connection. */
    CHECK(f, cl_send_z(&c, "GET /stream HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
    CHECK(f, cl_read(&c) == 0);
    char te[32];
    CHECK(f, c.status == 200 && !cl_header(&c, "transfer-encoding", te, sizeof te));
    CHECK(f, cl_header_is(&c, "connection", "close"));
    CHECK(f, body_is(&c, "alpha,beta,gamma"));
    cl_close(&c);
}

static void streaming_chunked_response(void **state)
{
    fx_t f;
    fx_start(&f, NULL, client_stream);
    fx_finish(&f);
}

static void client_http10_and_head(fx_t *f)
{
    client_t c;
    CHECK(f, cl_connect(&c, f->port, 0) == 0);
    CHECK(f, cl_send_z(&c, "GET /hello HTTP/1.0\r\n\r\n"));
    CHECK(f, cl_read(&c) == 0 && c.status == 200 && body_is(&c, hello));
    CHECK(f, cl_header_is(&c, "connection", "close") && !c.keep_alive);
    CHECK(f, cl_eof(&c));
    cl_close(&c);

    /* HTTP/1.0 keep-alive, then HEAD: the length of the GET, no body, connection usable. */
    CHECK(f, cl_connect(&c, f->port, 0) == 0);
    CHECK(f, cl_send_z(&c, "GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
    CHECK(f, cl_read(&c) == 0 && c.status == 200 && c.keep_alive);
    CHECK(f, cl_header_is(&c, "connection", "keep-alive"));
    c.head_req = true;
    CHECK(f, cl_send_z(&c, "HEAD /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
    CHECK(f, cl_read(&c) == 0 && c.status == 200 && bm_str_len(&c.body) == 0);
    CHECK(f, cl_header_is(&c, "content-length", "24"));
    c.head_req = true;
    CHECK(f, cl_send_z(&c, "HEAD /stream HTTP/1.1\r\nHost: t\r\n\r\n"));
    CHECK(f, cl_read(&c) == 0 && c.status == 200 && bm_str_len(&c.body) == 0);
    CHECK(f, cl_send_z(&c, get_hello));
    CHECK(f, cl_read(&c) == 0 && c.status == 200 && body_is(&c, hello));
    cl_close(&c);
}

static void http10_and_head(void **state)
{
    fx_t f;
    fx_start(&f, NULL, client_http10_and_head);
    fx_finish(&f);
}

static void client_limits(fx_t *f)
{
    client_t c;
    /* 414: a target of 64 KiB + 1 */
    size_t tl = 64 * 1024 + 1;
    char *req = malloc(tl + 64);
    memcpy(req, "GET /", 5);
    memset(req + 5, 'a', tl - 1);
    strcpy(req + 4 + tl, " HTTP/1.1\r\nHost: t\r\n\r\n");
    bool ok = cl_connect(&c, f->port, 0) == 0 && cl_send_z(&c, req) && cl_read(&c) == 0 &&
              is_json_error(&c, 414) && cl_eof(&c);
    cl_close(&c);
    /* ...and exactly 64 KiB is served (404: no such route) */
    req[4 + tl - 1] = ' ';
    strcpy(req + 4 + tl - 1, " HTTP/1.1\r\nHost: t\r\n\r\n");
    ok = ok && cl_connect(&c, f->port, 0) == 0 && cl_send_z(&c, req) && cl_read(&c) == 0 &&
         is_json_error(&c, 404);
    cl_close(&c);
    free(req);
    CHECK(f, ok);

    /* 431: header fields over 16 KiB */
    bm_str_t s = BM_STR_INIT;
    bm_str_puts(&s, "GET /hello HTTP/1.1\r\nHost: t\r\n");
    for (int i = 0; i < 400; i++)
        bm_str_printf(&s, "X-Field-%03d: %040d\r\n", i, i);
    bm_str_puts(&s, "\r\n");
    ok = cl_connect(&c, f->port, 0) == 0 && cl_send(&c, bm_str_data(&s), bm_str_len(&s)) &&
         cl_read(&c) == 0 && is_json_error(&c, 431) && cl_eof(&c);
    cl_close(&c);
    bm_str_dispose(&s);
    CHECK(f, ok);

    /* 413: Content-Length over the limit, refused before the body */
    CHECK(f, cl_connect(&c, f->port, 0) == 0);
    CHECK(f, cl_send_z(&c, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 1025\r\n\r\n"));
    CHECK(f, cl_read(&c) == 0 && is_json_error(&c, 413) && cl_eof(&c));
    cl_close(&c);

    /* 413: a chunked body that passes the limit; the rest of it is never read */
    CHECK(f, cl_connect(&c, f->port, 0) == 0);
    CHECK(f, cl_send_z(&c, "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"));
    char chunk[600];
    memset(chunk, 'q', sizeof chunk);
    CHECK(f, cl_send_z(&c, "258\r\n") && cl_send(&c, chunk, 600) && cl_send_z(&c, "\r\n"));
    CHECK(f, cl_send_z(&c, "258\r\n") && cl_send(&c, chunk, 600) && cl_send_z(&c, "\r\n"));
    CHECK(f, cl_read(&c) == 0 && is_json_error(&c, 413) && cl_eof(&c));
    cl_close(&c);

    /* 400: strictness, answered in the same shape */
    CHECK(f, cl_connect(&c, f->port, 0) == 0);
    CHECK(f, cl_send_z(&c, "GET /hello HTTP/1.1\r\nHost : t\r\n\r\n"));
    CHECK(f, cl_read(&c) == 0 && is_json_error(&c, 400) && cl_eof(&c));
    cl_close(&c);
    CHECK(f, cl_connect(&c, f->port, 0) == 0);
    CHECK(f, cl_send_z(&c, "GET /hello HTTP/1.1\nHost: t\n\n"));
    CHECK(f, cl_read(&c) == 0 && is_json_error(&c, 400) && cl_eof(&c));
    cl_close(&c);
}

static void client_new_limits(fx_t *f)
{
    static const char post[] = "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 500\r\n\r\n";
    char body[500];
    memset(body, 'b', sizeof body);
    client_t a, b;
    CHECK(f, cl_connect(&a, f->port, 0) == 0);
    CHECK(f, cl_send_z(&a, post) && cl_send(&a, body, sizeof body));
    CHECK(f, cl_read(&a) == 0 && a.status == 200);
    CHECK(f, cl_send_z(&a, "GET /shrink HTTP/1.1\r\nHost: t\r\n\r\n"));
    CHECK(f, cl_read(&a) == 0 && a.status == 204);
    /* a connection accepted after the change parses with the new limit */
    CHECK(f, cl_connect(&b, f->port, 0) == 0);
    CHECK(f, cl_send_z(&b, post));
    CHECK(f, cl_read(&b) == 0 && is_json_error(&b, 413) && cl_eof(&b));
    cl_close(&b);
    /* one accepted before keeps the limit it started with */
    CHECK(f, cl_send_z(&a, post) && cl_send(&a, body, sizeof body));
    CHECK(f, cl_read(&a) == 0 && a.status == 200);
    cl_close(&a);
}

static void new_limits_apply_to_new_connections(void **state)
{
    fx_t f;
    fx_start(&f, NULL, client_new_limits);
    fx_finish(&f);
}

static void limits_answered_as_json(void **state)
{
    bm_server_opts_t o;
    bm_server_opts_default(&o);
    o.max_body_bytes = 1024;
    fx_t f;
    fx_start(&f, &o, client_limits);
    fx_finish(&f);
    assert_int_equal(f.handled, 1); /* only the 64 KiB target reached the handler */
}

static void client_slowloris(fx_t *f)
{
    client_t c;
    CHECK(f, cl_connect(&c, f->port, 0) == 0);
    const char *req = "GET /hello HTTP/1.1\r\nHost: t\r\nUser-Agent: a-very-slow-client/1.0\r\n"
                      "Accept: application/json\r\n\r\n";
    size_t n = strlen(req), sent = 0;
    /* One byte per 20 ms; the wait for an answer paces the trickle. */
    for (; sent < n; sent++) {
        CHECK(f, cl_send(&c, req + sent, 1));
        struct pollfd pfd = {.fd = c.fd, .events = POLLIN};
        if (poll(&pfd, 1, 20) > 0)
            break;
    }
    CHECK(f, sent < n - 1); /* cut before the head was complete */
    CHECK(f, cl_read(&c) == 0 && is_json_error(&c, 408));
    CHECK(f, cl_header_is(&c, "connection", "close"));
    CHECK(f, cl_eof(&c));
    cl_close(&c);

    /* The body timeout bounds the gap between body bytes. */
    CHECK(f, cl_connect(&c, f->port, 0) == 0);
    CHECK(f, cl_send_z(&c, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nabc"));
    CHECK(f, cl_read(&c) == 0 && is_json_error(&c, 408) && cl_eof(&c));
    cl_close(&c);

    /* A connection that never sends a byte is closed without an answer. */
    CHECK(f, cl_connect(&c, f->port, 0) == 0);
    CHECK(f, cl_eof(&c));
    cl_close(&c);
}

static void header_timeout_cuts_slowloris(void **state)
{
    bm_server_opts_t o;
    bm_server_opts_default(&o);
    o.header_timeout_ms = 200;
    o.body_timeout_ms = 200;
    fx_t f;
    fx_start(&f, &o, client_slowloris);
    fx_finish(&f);
    assert_int_equal(f.handled, 0);
}

static void client_idle(fx_t *f)
{
    client_t c;
    CHECK(f, cl_connect(&c, f->port, 0) == 0);
    CHECK(f, cl_send_z(&c, get_hello));
    CHECK(f, cl_read(&c) == 0 && c.status == 200 && c.keep_alive);
    CHECK(f, cl_eof(&c)); /* closed by the server (cl_eof fails at the receive bound) */
    cl_close(&c);
}

static void idle_timeout_closes_keep_alive(void **state)
{
    bm_server_opts_t o;
    bm_server_opts_default(&o);
    o.idle_timeout_ms = 200;
    fx_t f;
    fx_start(&f, &o, client_idle);
    fx_finish(&f);
}

static void client_disconnect(fx_t *f)
{
    client_t c;
    CHECK(f, cl_connect(&c, f->port, 0) == 0);
    CHECK(f, cl_send_z(&c, "GET /slow HTTP/1.1\r\nHost: t\r\n\r\n"));
    CHECK(f, fx_wait(f)); /* the handler holds the request */
    cl_close(&c);
}

static void client_disconnect_fires_abort_once(void **state)
{
    fx_t f;
    fx_start(&f, NULL, client_disconnect);
    fx_run_until(&f, &f.flag); /* slow_end ran: the request was ended after the abort */
    fx_finish(&f);
    assert_int_equal(f.abort_count, 1);
    assert_true(f.gone_seen);
    assert_int_equal(f.gone_start_rc, BM_ECLOSED);
    assert_int_equal(f.gone_write_rc, BM_ECLOSED);
}

static void client_backpressure(fx_t *f)
{
    client_t c;
    CHECK(f, cl_connect(&c, f->port, 4096) == 0);
    CHECK(f, cl_send_z(&c, "GET /big HTTP/1.1\r\nHost: t\r\n\r\n"));
    CHECK(f, fx_wait(f)); /* the server cannot write any more: now read */
    CHECK(f, cl_read(&c) == 0 && c.status == 200);
    size_t n = bm_str_len(&c.body);
    CHECK(f, n >= 3 && memcmp(bm_str_data(&c.body) + n - 3, "END", 3) == 0);
    CHECK(f, n == f->big_written + 3);
    cl_close(&c);
}

static void backpressure_and_drain(void **state)
{
    bm_server_opts_t o;
    bm_server_opts_default(&o);
    o.write_high_water = 64 * 1024;
    fx_t f;
    fx_start(&f, &o, client_backpressure);
    fx_finish(&f);
    assert_true(f.was_unwritable);
    assert_int_equal(f.drain_count, 1);
}

/* A client that stops reading a response is cut after the send timeout, and the handler
 * learns it from its abort callback (a proxy then releases its upstream transfer). */
static void client_nonreader(fx_t *f)
{
    client_t c;
    CHECK(f, cl_connect(&c, f->port, 4096) == 0);
    CHECK(f, cl_send_z(&c, "GET /nonreader HTTP/1.1\r\nHost: t\r\n\r\n"));
    CHECK(f, fx_wait(f)); /* the server cannot write any more; never read */
    CHECK(f, fx_wait(f)); /* cut: the abort callback ran */
    cl_close(&c);
}

static void send_timeout_cuts_a_client_that_stops_reading(void **state)
{
    bm_server_opts_t o;
    bm_server_opts_default(&o);
    o.write_high_water = 64 * 1024;
    o.send_timeout_ms = 300;
    fx_t f;
    fx_start(&f, &o, client_nonreader);
    fx_run_until(&f, &f.flag);
    fx_finish(&f);
    assert_int_equal(f.abort_count, 1);
    /* not before the send timeout passed without progress: the last progress came after
     * progress_after_ms (the moment the handler saw the queue full may be later still, by
     * as long as the loop was kept from running on a loaded machine) */
    assert_true(f.progress_after_ms > 0);
    assert_true(f.abort_at_ms >= f.progress_after_ms + 300);
    assert_true(f.abort_at_ms >= f.unwritable_at_ms);
}

/*
 * A body that drips: each gap within bodyTimeout, the whole past bodyDeadline: 408.
 * Beside busy CPUs the client thread may wait long for a core: its gaps (40 ms asked) stay
 * within the gap bound only if that bound is far above them (500 ms), and the deadline's
 * clock starts before the head is sent, never after (a thread preempted between its send
 * and its clock read would otherwise see the 408 "early").
 */
static void client_body_drip(fx_t *f)
{
    client_t c;
    CHECK(f, cl_connect(&c, f->port, 0) == 0);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    CHECK(f, cl_send_z(&c, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 200\r\n\r\n"));
    int sent = 0;
    for (; sent < 200; sent++) {
        CHECK(f, cl_send(&c, "x", 1));
        struct pollfd pfd = {.fd = c.fd, .events = POLLIN};
        if (poll(&pfd, 1, 40) > 0) /* a byte every 40 ms: the gap bound (500 ms) holds */
            break;
    }
    CHECK(f, sent < 200);
    CHECK(f, cl_read(&c) == 0 && is_json_error(&c, 408));
    CHECK(f, strstr(bm_str_data(&c.body), "not complete in time") != NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
    CHECK(f, ms >= 1000 - 5); /* the loop's clock is coarse (whole ms, a jiffy behind) */
    CHECK(f, cl_eof(&c));
    cl_close(&c);
}

static void body_deadline_bounds_a_dripping_body(void **state)
{
    bm_server_opts_t o;
    bm_server_opts_default(&o);
    o.body_timeout_ms = 500;
    o.body_deadline_ms = 1000;
    fx_t f;
    fx_start(&f, &o, client_body_drip);
    fx_finish(&f);
    assert_int_equal(f.handled, 0);
}

/* One client address holds at most max_connections_per_client connections at once. */
static void client_per_client_cap(fx_t *f)
{
    client_t a, b, c;
    CHECK(f, cl_connect(&a, f->port, 0) == 0);
    CHECK(f, cl_send_z(&a, get_hello));
    CHECK(f, cl_read(&a) == 0 && a.status == 200);
    CHECK(f, cl_connect(&b, f->port, 0) == 0);
    CHECK(f, cl_send_z(&b, get_hello));
    CHECK(f, cl_read(&b) == 0 && b.status == 200);
    /* the third from the same address is closed on accept */
    CHECK(f, cl_connect(&c, f->port, 0) == 0);
    cl_send_z(&c, get_hello); /* may already fail: the close can come first */
    CHECK(f, cl_eof(&c));
    cl_close(&c);
    /* a closed one makes room */
    cl_close(&b);
    CHECK(f, fx_wait(f)); /* the server saw the close */
    CHECK(f, cl_connect(&c, f->port, 0) == 0);
    CHECK(f, cl_send_z(&c, get_hello));
    CHECK(f, cl_read(&c) == 0 && c.status == 200);
    cl_close(&c);
    cl_close(&a);
}

static void wait_one_connection(uv_timer_t *t)
{
    fx_t *f = t->data;
    if (bm_server_connection_count(f->srv) == 1) {
        uv_timer_stop(t);
        sem_post(&f->ct.sem);
    }
}

static void max_connections_per_client_enforced(void **state)
{
    bm_server_opts_t o;
    bm_server_opts_default(&o);
    o.max_connections_per_client = 2;
    fx_t f;
    fx_start(&f, &o, client_per_client_cap);
    /* after the refused one and the close of b, one connection (a) is left */
    RUN_UNTIL(&f.loop, f.handled >= 2 && bm_server_connection_count(f.srv) == 2, BOUND_MS);
    uv_timer_start(&f.t1, wait_one_connection, 1, 1);
    fx_finish(&f);
    assert_int_equal(f.handled, 3);
}

static void client_shutdown(fx_t *f)
{
    client_t c, d, g;
    CHECK(f, cl_connect(&c, f->port, 0) == 0);
    CHECK(f, cl_connect(&d, f->port, 0) == 0); /* idle keep-alive connection */
    CHECK(f, cl_send_z(&d, get_hello));
    CHECK(f, cl_read(&d) == 0 && d.status == 200 && d.keep_alive);
    CHECK(f, cl_connect(&g, f->port, 0) == 0); /* accepted, its request not sent yet */
    CHECK(f, cl_send_z(&c, "GET /shutdown HTTP/1.1\r\nHost: t\r\n\r\n"));
    CHECK(f, fx_wait(f)); /* shutdown was called, the request is in flight */
    client_t e;
    CHECK(f, cl_connect(&e, f->port, 0) == -ECONNREFUSED);
    CHECK(f, cl_eof(&d)); /* the idle keep-alive connection is closed at once */
    cl_close(&d);
    /* the fresh one raced the shutdown: its request is still answered, then it closes */
    CHECK(f, cl_send_z(&g, get_hello));
    CHECK(f, cl_read(&g) == 0 && g.status == 200);
    CHECK(f, cl_header_is(&g, "connection", "close"));
    CHECK(f, cl_eof(&g));
    cl_close(&g);
    CHECK(f, cl_read(&c) == 0 && c.status == 200 && body_is(&c, "finished"));
    CHECK(f, cl_header_is(&c, "connection", "close"));
    CHECK(f, cl_eof(&c));
    cl_close(&c);
}

static void graceful_shutdown(void **state)
{
    fx_t f;
    fx_start(&f, NULL, client_shutdown);
    fx_run_until(&f, &f.done_called);
    fx_finish(&f);
}

static void client_abort_and_truncation(fx_t *f)
{
    client_t c;
    CHECK(f, cl_connect(&c, f->port, 0) == 0);
    CHECK(f, cl_send_z(&c, "GET /abort-early HTTP/1.1\r\nHost: t\r\n\r\n"));
    CHECK(f, cl_read(&c) == 0 && is_json_error(&c, 502) && c.keep_alive);
    CHECK(f, cl_send_z(&c, "GET /abort-late HTTP/1.1\r\nHost: t\r\n\r\n"));
    CHECK(f, cl_read(&c) == -2); /* a chunked body cut by the close */
    cl_close(&c);
    CHECK(f, cl_connect(&c, f->port, 0) == 0);
    CHECK(f, cl_send_z(&c, "GET /short HTTP/1.1\r\nHost: t\r\n\r\n"));
    CHECK(f, cl_read(&c) == -2 && bm_str_len(&c.body) == 5); /* 5 of 10 bytes, then EOF */
    cl_close(&c);
}

static void abort_and_truncated_fixed_length(void **state)
{
    fx_t f;
    fx_start(&f, NULL, client_abort_and_truncation);
    fx_finish(&f);
}

static void client_max_connections(fx_t *f)
{
    client_t a, b;
    CHECK(f, cl_connect(&a, f->port, 0) == 0);
    CHECK(f, cl_send_z(&a, get_hello));
    CHECK(f, cl_read(&a) == 0 && a.status == 200);
    /* The kernel completes the handshake; the server closes the surplus connection. */
    CHECK(f, cl_connect(&b, f->port, 0) == 0);
    cl_send_z(&b, get_hello); /* may already fail: the close can come first */
    CHECK(f, cl_eof(&b));
    cl_close(&b);
    CHECK(f, cl_send_z(&a, get_hello));
    CHECK(f, cl_read(&a) == 0 && a.status == 200);
    cl_close(&a);
}

static void max_connections_enforced(void **state)
{
    bm_server_opts_t o;
    bm_server_opts_default(&o);
    o.max_connections = 1;
    fx_t f;
    fx_start(&f, &o, client_max_connections);
    fx_finish(&f);
    assert_int_equal(f.handled, 2);
}

static void server_done_flag(bm_server_t *srv, void *ud)
{
    *(bool *)ud = true;
}

/* A client on a plain non-blocking socket, driven by the loop through a poll watcher: it
 * sends `request` once the socket is writable and collects what comes back. */
typedef struct raw_client {
    uv_poll_t poll;
    int fd;
    const char *request;
    bool sent;
    char buf[1024];
    size_t got;
} raw_client_t;

static void on_raw_io(uv_poll_t *p, int status, int events)
{
    raw_client_t *c = p->data;
    if (status < 0) {
        uv_poll_stop(p);
        return;
    }
    if ((events & UV_WRITABLE) && !c->sent) {
        c->sent = send(c->fd, c->request, strlen(c->request), MSG_NOSIGNAL) > 0;
        if (c->sent)
            uv_poll_start(p, UV_READABLE, on_raw_io);
    }
    if (events & UV_READABLE) {
        ssize_t r = recv(c->fd, c->buf + c->got, sizeof c->buf - 1 - c->got, 0);
        if (r > 0)
            c->got += (size_t)r;
        c->buf[c->got] = '\0';
        if (r == 0 || c->got == sizeof c->buf - 1)
            uv_poll_stop(p);
    }
}

/* Listens, answers one request from a client on `family`, shuts down cleanly. */
static void one_request_on(const char *host, int family)
{
    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    fx_t f; /* the shared handler needs a fixture for its counters only */
    memset(&f, 0, sizeof f);
    bm_server_t *srv = bm_server_new(&loop, NULL, handler, &f);
    assert_int_equal(bm_server_port(srv), -1);
    assert_int_equal(bm_server_listen(srv, host, 0), 0);
    int port = bm_server_port(srv);
    assert_true(port > 0);
    /* A second listen on the same server is refused. */
    assert_int_equal(bm_server_listen(srv, host, 0), BM_EINVAL);

    int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK, 0);
    assert_true(fd >= 0);
    struct sockaddr_storage ss = {0};
    socklen_t sl;
    if (family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        a->sin6_port = htons((uint16_t)port);
        a->sin6_addr = in6addr_loopback;
        sl = sizeof *a;
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        a->sin_port = htons((uint16_t)port);
        a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        sl = sizeof *a;
    }
    int rc = connect(fd, (struct sockaddr *)&ss, sl);
    assert_true(rc == 0 || errno == EINPROGRESS);
    /* The loop runs both sides until the answer is in: the server and the client's socket. */
    raw_client_t c = {.fd = fd, .request = get_hello};
    assert_int_equal(uv_poll_init_socket(&loop, &c.poll, fd), 0);
    c.poll.data = &c;
    assert_int_equal(uv_poll_start(&c.poll, UV_WRITABLE | UV_READABLE, on_raw_io), 0);
    RUN_UNTIL(&loop, strstr(c.buf, hello) != NULL, BOUND_MS);
    assert_non_null(strstr(c.buf, "HTTP/1.1 200 OK\r\n"));
    assert_non_null(strstr(c.buf, hello));
    assert_int_equal(f.handled, 1);
    uv_close((uv_handle_t *)&c.poll, NULL);
    uv_run(&loop, UV_RUN_NOWAIT); /* the watcher is closed before its socket */
    close(fd);

    bool done = false;
    bm_server_shutdown(srv, 0, server_done_flag, &done);
    bm_server_shutdown(srv, 0, server_done_flag, &done); /* the second call does nothing */
    RUN_UNTIL(&loop, done, BOUND_MS);
    assert_true(done);
    bm_server_free(srv);
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void listen_addresses(void **state)
{
    one_request_on("127.0.0.1", AF_INET);
    one_request_on("localhost", AF_INET);
    one_request_on("::1", AF_INET6);
    one_request_on("[::1]", AF_INET6);

    uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    bm_server_t *a = bm_server_new(&loop, NULL, handler, NULL);
    bm_server_t *b = bm_server_new(&loop, NULL, handler, NULL);
    assert_int_equal(bm_server_listen(a, "not-an-address", 0), BM_EINVAL);
    assert_int_equal(bm_server_listen(a, "127.0.0.1", 70000), BM_EINVAL);
    assert_int_equal(bm_server_listen(a, "127.0.0.1", 0), 0);
    int rc = bm_server_listen(b, "127.0.0.1", bm_server_port(a)); /* in use */
    assert_true(rc < 0);
    assert_int_equal(bm_server_port(b), -1);
    bool done = false;
    bm_server_shutdown(a, 0, server_done_flag, &done);
    RUN_UNTIL(&loop, done, BOUND_MS);
    assert_true(done);
    bm_server_free(a);
    bm_server_free(b); /* never listened: free is valid without a shutdown */
    uv_run(&loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop), 0);
}

int main(void)
{
    bm_log_setup(BM_LOG_ERROR, BM_LOG_TEXT, NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(keep_alive),
        cmocka_unit_test(pipelining_in_order),
        cmocka_unit_test(pipelining_over_high_water),
        cmocka_unit_test(answers_leave_in_completion_order),
        cmocka_unit_test(chunked_request_body),
        cmocka_unit_test(expect_continue),
        cmocka_unit_test(streaming_chunked_response),
        cmocka_unit_test(http10_and_head),
        cmocka_unit_test(limits_answered_as_json),
        cmocka_unit_test(header_timeout_cuts_slowloris),
        cmocka_unit_test(idle_timeout_closes_keep_alive),
        cmocka_unit_test(client_disconnect_fires_abort_once),
        cmocka_unit_test(backpressure_and_drain),
        cmocka_unit_test(graceful_shutdown),
        cmocka_unit_test(send_timeout_cuts_a_client_that_stops_reading),
        cmocka_unit_test(body_deadline_bounds_a_dripping_body),
        cmocka_unit_test(max_connections_per_client_enforced),
        cmocka_unit_test(abort_and_truncated_fixed_length),
        cmocka_unit_test(max_connections_enforced),
        cmocka_unit_test(new_limits_apply_to_new_connections),
        cmocka_unit_test(listen_addresses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
