/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of events, the cluster event stream. The pure parts (topic names, both query
 * forms, serialisation) are tested directly. The stream itself runs on a real server on
 * loopback with libuv clients on the same loop, so every wait is "run the loop until a
 * condition holds", with a bound (loop_guard.h): 400 answers, headers at once, one
 * serialised buffer fanned out to several subscribers, first copy wins within a bounded
 * window (checked against a model), a subscriber that stops reading dropped while the
 * others receive everything, keepalive comments, and the cluster head events driven by a
 * real head tracker (head and head_v2 from one node's data, chain_reorg on a re-org only,
 * the second head_v2 when the payload becomes full, never an optimistic copy).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "base/buf.h"
#include "base/clock.h"
#include "base/err.h"
#include "base/json.h"
#include "base/log.h"
#include "cluster/chain.h"
#include "cluster/events.h"
#include "cluster/head.h"
#include "http/router.h"
#include "http/server.h"
#include "loop_guard.h"

#define BOUND_MS 10000 /* every wait ends within this, or the test fails */

/* ---- pure parts -------------------------------------------------------------------------- */

static void test_topic_names(void **state)
{
    (void)state;
    for (int t = 0; t < BM_TOPIC_COUNT; t++) {
        const char *n = bm_topic_name((bm_topic_t)t);
        assert_true(n[0] != '\0');
        bm_topic_t back;
        assert_int_equal(bm_topic_parse(n, strlen(n), &back), 0);
        assert_int_equal(back, t);
    }
    assert_int_equal(BM_TOPIC_COUNT, 24); /* every topic of apis/eventstream/index.yaml */
    assert_int_equal(bm_topic_parse("heads", 5, NULL), BM_EINVAL);
    assert_int_equal(bm_topic_parse("head", 3, NULL), BM_EINVAL);
    assert_int_equal(bm_topic_parse("blob_sidecar", 12, NULL), BM_EINVAL); /* removed */
    assert_string_equal(bm_topic_name(BM_TOPIC_COUNT), "");
}

static bm_topic_mask_t parse_ok(const char *q)
{
    bm_topic_mask_t m = 0;
    char bad[64];
    int rc = bm_events_parse_topics(q, strlen(q), &m, bad, sizeof bad);
    if (rc != 0)
        fail_msg("%s: %d (%s)", q, rc, bad);
    return m;
}

static void test_parse_topics_forms(void **state)
{
    (void)state;
    bm_topic_mask_t hb = BM_TOPIC_BIT(BM_TOPIC_HEAD) | BM_TOPIC_BIT(BM_TOPIC_BLOCK);
    assert_int_equal(parse_ok("topics=head&topics=block"), hb);
    assert_int_equal(parse_ok("topics=head,block"), hb);
    assert_int_equal(parse_ok("topics=head%2Cblock"), hb);
    assert_int_equal(parse_ok("topics=head%2cblock"), hb);
    assert_int_equal(parse_ok("topics=head,%20block"), hb);
    assert_int_equal(parse_ok("x=1&topics=head&y&topics=block,head"), hb); /* others ignored */
    assert_int_equal(parse_ok("topics=head_v2"), BM_TOPIC_BIT(BM_TOPIC_HEAD_V2));
    /* every topic, both forms */
    bm_str_t rep = BM_STR_INIT, com = BM_STR_INIT;
    bm_str_puts(&com, "topics=");
    for (int t = 0; t < BM_TOPIC_COUNT; t++) {
        bm_str_printf(&rep, "%stopics=%s", t ? "&" : "", bm_topic_name((bm_topic_t)t));
        bm_str_printf(&com, "%s%s", t ? "," : "", bm_topic_name((bm_topic_t)t));
    }
    assert_int_equal(parse_ok(bm_str_data(&rep)), BM_TOPIC_ALL);
    assert_int_equal(parse_ok(bm_str_data(&com)), BM_TOPIC_ALL);
    bm_str_dispose(&rep);
    bm_str_dispose(&com);
}

static void test_parse_topics_errors(void **state)
{
    (void)state;
    static const struct {
        const char *q;
        int rc;
        const char *bad;
    } cases[] = {
        {"topics=bogus", BM_EINVAL, "bogus"},
        {"topics=head&topics=bogus", BM_EINVAL, "bogus"},
        {"topics=head,Block", BM_EINVAL, "Block"},
        {"topics=head%2Cnope", BM_EINVAL, "nope"},
        {"topics=", BM_EINVAL, ""},
        {"topics", BM_EINVAL, ""},
        {"topics=head,", BM_EINVAL, ""},
        {"topics=blob_sidecar", BM_EINVAL, "blob_sidecar"},
        {"topics=%zz", BM_EINVAL, "%zz"},
        {"", BM_ENOTFOUND, ""},
        {"topic=head", BM_ENOTFOUND, ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bm_topic_mask_t m = 12345;
        char bad[64] = "x";
        int rc = bm_events_parse_topics(cases[i].q, strlen(cases[i].q), &m, bad, sizeof bad);
        if (rc != cases[i].rc || strcmp(bad, cases[i].bad) != 0)
            fail_msg("%s: rc %d bad '%s'", cases[i].q, rc, bad);
        assert_int_equal(m, 12345); /* untouched on error */
    }
    /* a long bad name is cut, never overflows */
    char q[300] = "topics=";
    memset(q + 7, 'x', 250);
    q[257] = '\0';
    bm_topic_mask_t m;
    char bad[16];
    assert_int_equal(bm_events_parse_topics(q, strlen(q), &m, bad, sizeof bad), BM_EINVAL);
    assert_int_equal(strlen(bad), 15);
    assert_int_equal(bm_events_parse_topics(NULL, 0, &m, NULL, 0), BM_ENOTFOUND);
}

static void test_serialise_format(void **state)
{
    (void)state;
    const char *pretty = "{\n  \"slot\" : \"10\",\r\n  \"block\": \"0xab\",\n  \"x\": [1, 2]\n}\n";
    bm_buf_t *b = bm_events_serialise("block", pretty, strlen(pretty));
    assert_non_null(b);
    const char *want = "event: block\ndata: {\"slot\":\"10\",\"block\":\"0xab\",\"x\":[1,2]}\n\n";
    assert_int_equal(b->len, strlen(want));
    assert_memory_equal(b->data, want, b->len);
    bm_buf_unref(b);
    /* strings keep their bytes, escapes included: still one line */
    const char *esc = "{\"a\":\"x\\ny\"}";
    b = bm_events_serialise("attestation", esc, strlen(esc));
    assert_non_null(b);
    assert_string_equal(b->data, "event: attestation\ndata: {\"a\":\"x\\ny\"}\n\n");
    bm_buf_unref(b);
    assert_null(bm_events_serialise("block", "{\"a\":", 5));
    assert_null(bm_events_serialise("block", "", 0));
}

/* ---- fixture: server + events on a loop, libuv clients ------------------------------------ */

typedef struct cli cli_t;

typedef struct fx {
    uv_loop_t loop;
    bm_clock_t *clock; /* manual: the stream's timers fire only when a test advances it */
    uv_timer_t tick;
    bm_server_t *srv;
    bm_router_t *router;
    bm_events_t *ev;
    int port;
    bool server_done;
    cli_t *clis[16];
    int ncli;
    /* tracker tests */
    bm_head_t *head;
    /* pump test */
    int pumped, pump_total;
    size_t pump_size;
} fx_t;

struct cli {
    uv_tcp_t tcp;
    uv_connect_t creq;
    uv_write_t wreq;
    fx_t *fx;
    char *raw;
    size_t rlen, rcap;
    size_t hdr_end; /* raw offset of the body, 0 until the head is complete */
    int status;
    bool chunked;
    size_t rpos; /* chunk parser position in raw */
    bm_str_t body;
    size_t scan;    /* body offset up to which events were counted */
    int nev;        /* complete events (blank-line terminated) in body */
    bool chunk_end; /* the last chunk arrived */
    bool eof;
    bool connected;
    bool closed;
    bool reading;
    char request[1024];
};

static void fx_init(fx_t *f, const bm_events_opts_t *eo)
{
    memset(f, 0, sizeof *f);
    bm_log_setup(BM_LOG_WARN, BM_LOG_TEXT, NULL);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    uv_timer_init(&f->loop, &f->tick);
    f->tick.data = f;
    f->clock = bm_clock_manual_new(&f->loop, bm_clock_now_ms());
    assert_non_null(f->clock);
    f->ev = bm_events_new(f->clock, eo);
    assert_non_null(f->ev);
    f->router = bm_router_new();
    assert_non_null(f->router);
    assert_int_equal(bm_events_register(f->ev, f->router), 0);
    bm_server_opts_t so;
    bm_server_opts_default(&so);
    f->srv = bm_server_new(&f->loop, &so, bm_router_dispatch, f->router);
    assert_non_null(f->srv);
    assert_int_equal(bm_server_listen(f->srv, "127.0.0.1", 0), 0);
    f->port = bm_server_port(f->srv);
}

typedef bool (*pred_fn)(void *arg);

/* Runs the loop until p(arg) holds (asserted), with a bound. */
static void run_until(fx_t *f, pred_fn p, void *arg)
{
    RUN_UNTIL(&f->loop, p(arg), BOUND_MS);
    assert_true(p(arg));
}

/* Runs the loop for whatever is ready now (a few turns), without blocking. */
static void run_ready(fx_t *f)
{
    for (int i = 0; i < 8; i++)
        uv_run(&f->loop, UV_RUN_NOWAIT);
}

static void on_srv_done(bm_server_t *srv, void *ud)
{
    (void)srv;
    ((fx_t *)ud)->server_done = true;
}

static bool flag_set(void *arg)
{
    return *(bool *)arg;
}

static void on_cli_closed(uv_handle_t *h)
{
    cli_t *c = h->data;
    c->closed = true;
}

static void cli_close(cli_t *c)
{
    if (!uv_is_closing((uv_handle_t *)&c->tcp))
        uv_close((uv_handle_t *)&c->tcp, on_cli_closed);
}

static void fx_done(fx_t *f)
{
    bm_events_free(f->ev);
    if (f->head)
        bm_head_free(f->head);
    for (int i = 0; i < f->ncli; i++)
        cli_close(f->clis[i]);
    bm_server_shutdown(f->srv, 0, on_srv_done, f);
    run_until(f, flag_set, &f->server_done);
    bm_server_free(f->srv);
    bm_router_free(f->router);
    uv_close((uv_handle_t *)&f->tick, NULL);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    bm_clock_free(f->clock);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    for (int i = 0; i < f->ncli; i++) {
        assert_true(f->clis[i]->closed);
        free(f->clis[i]->raw);
        bm_str_dispose(&f->clis[i]->body);
        free(f->clis[i]);
    }
    assert_int_equal(uv_loop_close(&f->loop), 0);
}

/* Parses what arrived: the head once, then chunks into body. */
static void cli_parse(cli_t *c)
{
    if (!c->hdr_end) {
        char *e = memmem(c->raw, c->rlen, "\r\n\r\n", 4);
        if (!e)
            return;
        c->hdr_end = (size_t)(e - c->raw) + 4;
        c->status = atoi(c->raw + 9);
        c->chunked = memmem(c->raw, c->hdr_end, "Transfer-Encoding: chunked", 26) != NULL;
        c->rpos = c->hdr_end;
    }
    if (!c->chunked) {
        bm_str_append(&c->body, c->raw + c->rpos, c->rlen - c->rpos);
        c->rpos = c->rlen;
        return;
    }
    while (!c->chunk_end) {
        char *crlf = memmem(c->raw + c->rpos, c->rlen - c->rpos, "\r\n", 2);
        if (!crlf)
            return;
        size_t size = strtoul(c->raw + c->rpos, NULL, 16);
        size_t data = (size_t)(crlf - c->raw) + 2;
        if (size == 0) {
            c->chunk_end = true;
            return;
        }
        if (c->rlen < data + size + 2)
            return;
        bm_str_append(&c->body, c->raw + data, size);
        c->rpos = data + size + 2;
    }
}

/* Counts events completed since the last call (incrementally: bodies get large). */
static void cli_count(cli_t *c)
{
    const char *b = bm_str_data(&c->body);
    size_t len = bm_str_len(&c->body);
    while (c->scan + 1 < len) {
        const char *e = memmem(b + c->scan, len - c->scan, "\n\n", 2);
        if (!e)
            break;
        c->nev++;
        c->scan = (size_t)(e - b) + 2;
    }
}

static void on_alloc(uv_handle_t *h, size_t sz, uv_buf_t *b)
{
    cli_t *c = h->data;
    if (c->rcap - c->rlen < sz) {
        c->rcap = c->rlen + sz + 65536;
        c->raw = realloc(c->raw, c->rcap);
        assert_non_null(c->raw);
    }
    b->base = c->raw + c->rlen;
    b->len = c->rcap - c->rlen;
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
    cli_t *c = s->data;
    (void)b;
    if (n < 0) {
        c->eof = true;
        uv_read_stop(s);
        return;
    }
    c->rlen += (size_t)n;
    cli_parse(c);
    cli_count(c);
}

static void on_written(uv_write_t *w, int status)
{
    (void)w;
    (void)status;
}

static void on_connected(uv_connect_t *r, int status)
{
    cli_t *c = r->data;
    assert_int_equal(status, 0);
    c->connected = true;
    uv_buf_t b = uv_buf_init(c->request, (unsigned)strlen(c->request));
    uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, on_written);
    if (c->reading)
        uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

/* A client asking GET target; `reading` false: it never reads (a tiny receive buffer). */
static cli_t *cli_new(fx_t *f, const char *target, bool reading)
{
    cli_t *c = calloc(1, sizeof *c);
    assert_non_null(c);
    c->fx = f;
    c->reading = reading;
    snprintf(c->request, sizeof c->request,
             "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n", target);
    assert_int_equal(uv_tcp_init(&f->loop, &c->tcp), 0);
    c->tcp.data = c;
    c->creq.data = c;
    if (!reading) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        assert_true(fd >= 0);
        int small = 2048;
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
        assert_int_equal(uv_tcp_open(&c->tcp, fd), 0);
    }
    struct sockaddr_in a;
    uv_ip4_addr("127.0.0.1", f->port, &a);
    assert_int_equal(uv_tcp_connect(&c->creq, &c->tcp, (struct sockaddr *)&a, on_connected), 0);
    assert_true(f->ncli < 16);
    f->clis[f->ncli++] = c;
    return c;
}

static bool cli_has_head(void *arg)
{
    cli_t *c = arg;
    return c->hdr_end || c->eof;
}

static bool subscribers_are(void *arg)
{
    fx_t *f = ((void **)arg)[0];
    uint64_t n = (uint64_t)(uintptr_t)((void **)arg)[1];
    return bm_events_stats(f->ev)->subscribers == n;
}

static void wait_subscribers(fx_t *f, uint64_t n)
{
    void *arg[2] = {f, (void *)(uintptr_t)n};
    run_until(f, subscribers_are, arg);
}

/* A subscriber whose 200 head arrived. */
static cli_t *subscribe(fx_t *f, const char *topics)
{
    char target[512];
    snprintf(target, sizeof target, "/eth/v1/events?topics=%s", topics);
    uint64_t before = bm_events_stats(f->ev)->subscribers;
    cli_t *c = cli_new(f, target, true);
    run_until(f, cli_has_head, c);
    assert_int_equal(c->status, 200);
    wait_subscribers(f, before + 1);
    return c;
}

/* Number of complete events (ending in a blank line) of `topic` in the client's body. */
static int count_events(cli_t *c, const char *topic)
{
    char pat[96];
    snprintf(pat, sizeof pat, "event: %s\ndata: ", topic);
    int n = 0;
    const char *p = bm_str_data(&c->body), *end = p + bm_str_len(&c->body);
    while ((p = memmem(p, (size_t)(end - p), pat, strlen(pat))) != NULL) {
        const char *nl = memmem(p, (size_t)(end - p), "\n\n", 2);
        if (!nl)
            break;
        n++;
        p = nl + 2;
    }
    return n;
}

/* The data line of the k-th `topic` event (k from 0), copied into out; false if none. */
static bool event_data(cli_t *c, const char *topic, int k, char *out, size_t cap)
{
    char pat[96];
    snprintf(pat, sizeof pat, "event: %s\ndata: ", topic);
    const char *p = bm_str_data(&c->body), *end = p + bm_str_len(&c->body);
    for (int i = 0; (p = memmem(p, (size_t)(end - p), pat, strlen(pat))) != NULL; i++) {
        p += strlen(pat);
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl)
            return false;
        if (i == k) {
            size_t n = (size_t)(nl - p);
            if (n >= cap)
                return false;
            memcpy(out, p, n);
            out[n] = '\0';
            return true;
        }
    }
    return false;
}

typedef struct count_arg {
    cli_t *c;
    const char *topic;
    int n;
} count_arg_t;

static bool has_events(void *arg)
{
    count_arg_t *a = arg;
    return count_events(a->c, a->topic) >= a->n;
}

static void wait_events(fx_t *f, cli_t *c, const char *topic, int n)
{
    count_arg_t a = {c, topic, n};
    run_until(f, has_events, &a);
}

/* ---- the route ------------------------------------------------------------------------------ */

static void test_route_400s(void **state)
{
    (void)state;
    fx_t f;
    fx_init(&f, NULL);
    static const struct {
        const char *target;
        const char *body;
    } cases[] = {
        {"/eth/v1/events?topics=bogus", "{\"code\":400,\"message\":\"Invalid topic: bogus\"}"},
        {"/eth/v1/events?topics=head&topics=nope",
         "{\"code\":400,\"message\":\"Invalid topic: nope\"}"},
        {"/eth/v1/events?topics=head,blob_sidecar",
         "{\"code\":400,\"message\":\"Invalid topic: blob_sidecar\"}"},
        {"/eth/v1/events", "{\"code\":400,\"message\":\"Invalid topic: no topics given\"}"},
        {"/eth/v1/events?topics=", "{\"code\":400,\"message\":\"Invalid topic: (empty)\"}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cli_t *c = cli_new(&f, cases[i].target, true);
        run_until(&f, cli_has_head, c);
        assert_int_equal(c->status, 400);
        char *e = memmem(c->raw, c->rlen, "\r\n\r\n", 4);
        assert_non_null(e);
        const char *want = cases[i].body;
        RUN_UNTIL(&f.loop, c->rlen >= c->hdr_end + strlen(want), BOUND_MS);
        assert_true(c->rlen >= c->hdr_end + strlen(want));
        assert_memory_equal(c->raw + c->hdr_end, want, strlen(want));
        assert_non_null(memmem(c->raw, c->hdr_end, "application/json", 16));
    }
    assert_int_equal(bm_events_stats(f.ev)->rejected, 5);
    assert_int_equal(bm_events_stats(f.ev)->subscribers, 0);
    fx_done(&f);
}

static void test_headers_at_once(void **state)
{
    (void)state;
    fx_t f;
    fx_init(&f, NULL);
    /* nothing will ever be published: the head must come at once anyway */
    cli_t *c = subscribe(&f, "head,block&topics=voluntary_exit");
    assert_non_null(memmem(c->raw, c->hdr_end, "Content-Type: text/event-stream", 31));
    assert_non_null(memmem(c->raw, c->hdr_end, "Cache-Control: no-cache", 23));
    assert_true(c->chunked);
    assert_int_equal(bm_str_len(&c->body), 0);
    assert_int_equal(bm_events_stats(f.ev)->subscribed, 1);
    /* a client leaving is noticed and counted */
    cli_close(c);
    wait_subscribers(&f, 0);
    fx_done(&f);
}

/* ---- fan-out and dedup ----------------------------------------------------------------------- */

static const char BLOCK_A[] =
    "{\"slot\":\"10\",\"block\":\"0x9a2fefd2fdb57f74993c7780ea5b9030d2897b"
    "615b89f808011ca5aebed54eaf\",\"execution_optimistic\":false}";
static const char BLOCK_A_REORDERED[] = "{ \"execution_optimistic\": false,\n \"block\": "
                                        "\"0x9a2fefd2fdb57f74993c7780ea5b9030d2897b615b89f8"
                                        "08011ca5aebed54eaf\", \"slot\": \"10\" }";

static void test_fanout_one_buffer(void **state)
{
    (void)state;
    fx_t f;
    fx_init(&f, NULL);
    cli_t *a = subscribe(&f, "block");
    cli_t *b = subscribe(&f, "head,block");
    cli_t *c = subscribe(&f, "block&topics=finalized_checkpoint");
    cli_t *h = subscribe(&f, "head");
    bm_events_node_text(0, "block", BLOCK_A, strlen(BLOCK_A), f.ev);
    /* the same block from two other nodes, keys in another order: a copy */
    bm_events_node_text(1, "block", BLOCK_A_REORDERED, strlen(BLOCK_A_REORDERED), f.ev);
    bm_events_node_text(2, "block", BLOCK_A, strlen(BLOCK_A), f.ev);
    wait_events(&f, a, "block", 1);
    wait_events(&f, b, "block", 1);
    wait_events(&f, c, "block", 1);
    run_ready(&f);
    const bm_events_stats_t *st = bm_events_stats(f.ev);
    assert_int_equal(st->serialised, 1); /* one buffer ... */
    assert_int_equal(st->events_out, 3); /* ... written to three subscribers */
    assert_int_equal(st->duplicates, 2);
    assert_int_equal(st->node_events, 3);
    const char *want = "event: block\ndata: {\"slot\":\"10\",\"block\":\"0x9a2fefd2fdb57f74993c778"
                       "0ea5b9030d2897b615b89f808011ca5aebed54eaf\",\"execution_optimistic\":false}"
                       "\n\n";
    assert_string_equal(bm_str_data(&a->body), want);
    assert_string_equal(bm_str_data(&b->body), want);
    assert_string_equal(bm_str_data(&c->body), want);
    assert_int_equal(bm_str_len(&h->body), 0);
    assert_null(memmem(bm_str_data(&a->body), bm_str_len(&a->body), "id:", 3));
    fx_done(&f);
}

static void test_node_events_filtered(void **state)
{
    (void)state;
    fx_t f;
    fx_init(&f, NULL);
    cli_t *c = subscribe(&f, "block,attestation,head,chain_reorg");
    /* an optimistic copy never goes out */
    const char *opt = "{\"slot\":\"11\",\"block\":\"0x01\",\"execution_optimistic\":true}";
    bm_events_node_text(0, "block", opt, strlen(opt), f.ev);
    /* head and chain_reorg come only from the tracker, never from a node */
    const char *head = "{\"slot\":\"11\",\"block\":\"0x01\"}";
    bm_events_node_text(0, "head", head, strlen(head), f.ev);
    bm_events_node_text(0, "chain_reorg", head, strlen(head), f.ev);
    /* invalid JSON and unknown topics are dropped */
    bm_events_node_text(0, "block", "{\"slot\":", 8, f.ev);
    bm_events_node_text(0, "nonsense", head, strlen(head), f.ev);
    /* an exit nobody wants yet still enters the window */
    const char *ex1 =
        "{\"message\":{\"epoch\":\"1\",\"validator_index\":\"1\"},\"signature\":\"0x01\"}";
    const char *ex2 =
        "{\"message\":{\"epoch\":\"1\",\"validator_index\":\"2\"},\"signature\":\"0x01\"}";
    bm_events_node_text(0, "voluntary_exit", ex1, strlen(ex1), f.ev);
    const char *att = "{\"aggregation_bits\":\"0x01\",\"signature\":\"0x02\"}";
    bm_events_node_text(0, "attestation", att, strlen(att), f.ev);
    wait_events(&f, c, "attestation", 1);
    run_ready(&f);
    const bm_events_stats_t *st = bm_events_stats(f.ev);
    assert_int_equal(st->untrusted, 1);
    assert_int_equal(st->bad_events, 2);
    assert_int_equal(st->serialised, 1);
    assert_int_equal(count_events(c, "block"), 0);
    assert_int_equal(count_events(c, "head"), 0);
    assert_int_equal(count_events(c, "chain_reorg"), 0);
    /* a subscriber arriving later does not get a slow node's copy of that exit */
    cli_t *x = subscribe(&f, "voluntary_exit");
    bm_events_node_text(2, "voluntary_exit", ex1, strlen(ex1), f.ev);
    bm_events_node_text(2, "voluntary_exit", ex2, strlen(ex2), f.ev);
    wait_events(&f, x, "voluntary_exit", 1);
    run_ready(&f);
    assert_int_equal(count_events(x, "voluntary_exit"), 1);
    assert_non_null(strstr(bm_str_data(&x->body), "\"validator_index\":\"2\""));
    assert_int_equal(bm_events_stats(f.ev)->duplicates, 1);
    fx_done(&f);
}

/*
 * First copy wins within a window of W keys: an event is suppressed exactly when its key
 * is among the last W keys accepted. Random events over a pool of 40 values, window 16,
 * compared with a model (this also exercises the set's deletions in every position).
 */
static void test_dedup_window_bounded(void **state)
{
    (void)state;
    bm_events_opts_t o;
    bm_events_opts_default(&o);
    o.dedup_window = 16;
    fx_t f;
    fx_init(&f, &o);
    cli_t *c = subscribe(&f, "voluntary_exit");
    (void)c;
    int window[16], wn = 0, wpos = 0;
    uint64_t expect = 0;
    uint32_t rnd = 12345;
    for (int i = 0; i < 3000; i++) {
        rnd = rnd * 1103515245u + 12345u;
        int v = (int)((rnd >> 16) % 40);
        bool seen = false;
        for (int k = 0; k < wn; k++)
            if (window[k] == v)
                seen = true;
        if (!seen) {
            expect++;
            if (wn < 16) {
                window[wn++] = v;
            } else {
                window[wpos] = v; /* oldest out */
                wpos = (wpos + 1) % 16;
            }
        }
        char data[128];
        /* key order varies with i: the canonical form must not care */
        if (i & 1)
            snprintf(data, sizeof data,
                     "{\"message\":{\"epoch\":\"%d\",\"validator_index\":\"7\"},"
                     "\"signature\":\"0x01\"}",
                     v);
        else
            snprintf(data, sizeof data,
                     "{\"signature\":\"0x01\",\"message\":{\"validator_index\":"
                     "\"7\",\"epoch\":\"%d\"}}",
                     v);
        bm_events_node_text((size_t)(i % 3), "voluntary_exit", data, strlen(data), f.ev);
        if (i % 200 == 0)
            run_ready(&f); /* let the client read */
    }
    const bm_events_stats_t *st = bm_events_stats(f.ev);
    assert_int_equal(st->serialised, expect);
    assert_int_equal(st->duplicates, 3000 - expect);
    assert_true(expect > 40 && expect < 3000); /* both paths taken, evictions happened */
    wait_events(&f, c, "voluntary_exit", (int)expect);
    fx_done(&f);
}

/* ---- slow subscribers ---------------------------------------------------------------------- */

#define PUMP_EVENTS 200
#define PUMP_BATCH 2

static void pump(uv_timer_t *t)
{
    fx_t *f = t->data;
    for (int k = 0; k < PUMP_BATCH && f->pumped < f->pump_total; k++) {
        bm_str_t s = BM_STR_INIT;
        bm_str_printf(&s, "{\"n\":\"%d\",\"pad\":\"", f->pumped);
        for (size_t i = 0; i < f->pump_size; i++)
            bm_str_putc(&s, (char)('a' + (i + (size_t)f->pumped) % 26));
        bm_str_puts(&s, "\"}");
        bm_events_node_text(0, "attestation", bm_str_data(&s), bm_str_len(&s), f->ev);
        bm_str_dispose(&s);
        f->pumped++;
    }
    if (f->pumped >= f->pump_total)
        uv_timer_stop(t);
}

typedef struct all_arg {
    fx_t *f;
    cli_t **good;
    int ngood;
} all_arg_t;

static bool all_received(void *arg)
{
    all_arg_t *a = arg;
    if (a->f->pumped < a->f->pump_total)
        return false;
    for (int i = 0; i < a->ngood; i++)
        if (a->good[i]->nev < a->f->pump_total)
            return false;
    return true;
}

static void test_slow_subscriber_dropped(void **state)
{
    (void)state;
    bm_events_opts_t o;
    bm_events_opts_default(&o);
    o.subscriber_max_pending = 1024 * 1024;
    fx_t f;
    fx_init(&f, &o);
    cli_t *good[3];
    for (int i = 0; i < 3; i++)
        good[i] = subscribe(&f, "attestation");
    cli_t *slow = cli_new(&f, "/eth/v1/events?topics=attestation", false);
    wait_subscribers(&f, 4);
    f.pump_total = PUMP_EVENTS;
    f.pump_size = 16 * 1024;
    uv_timer_start(&f.tick, pump, 1, 1);
    all_arg_t a = {&f, good, 3};
    run_until(&f, all_received, &a);
    const bm_events_stats_t *st = bm_events_stats(f.ev);
    assert_int_equal(st->dropped, 1);
    assert_int_equal(st->subscribers, 3);
    assert_int_equal(st->serialised, PUMP_EVENTS);
    /* everyone else got every event, whole and in order */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(count_events(good[i], "attestation"), PUMP_EVENTS);
        char d[64 * 1024], want[32];
        for (int k = 0; k < PUMP_EVENTS; k += 37) {
            assert_true(event_data(good[i], "attestation", k, d, sizeof d));
            snprintf(want, sizeof want, "{\"n\":\"%d\",", k);
            assert_memory_equal(d, want, strlen(want));
            assert_int_equal(strlen(d), f.pump_size + strlen(want) + 9);
        }
    }
    (void)slow;
    fx_done(&f);
}

static bool keepalive_seen(void *arg)
{
    cli_t *c = arg;
    return bm_str_len(&c->body) >= 3;
}

static void test_keepalive(void **state)
{
    (void)state;
    bm_events_opts_t o;
    bm_events_opts_default(&o);
    o.keepalive_ms = 50;
    fx_t f;
    fx_init(&f, &o);
    cli_t *a = subscribe(&f, "head");
    cli_t *b = subscribe(&f, "block");
    /* nothing before the keepalive period is over, then a comment to each */
    bm_clock_manual_advance(f.clock, 49);
    run_ready(&f);
    assert_int_equal(bm_str_len(&a->body), 0);
    assert_int_equal(bm_str_len(&b->body), 0);
    assert_int_equal(bm_events_stats(f.ev)->keepalives, 0);
    bm_clock_manual_advance(f.clock, 1);
    run_until(&f, keepalive_seen, a);
    run_until(&f, keepalive_seen, b);
    assert_memory_equal(bm_str_data(&a->body), ":\n\n", 3);
    assert_memory_equal(bm_str_data(&b->body), ":\n\n", 3);
    assert_int_equal(bm_events_stats(f.ev)->keepalives, 2);
    assert_int_equal(bm_events_stats(f.ev)->events_out, 0);
    fx_done(&f);
}

static bool chunk_ended(void *arg)
{
    cli_t *c = arg;
    return c->chunk_end;
}

static void test_shutdown_ends_streams(void **state)
{
    (void)state;
    fx_t f;
    fx_init(&f, NULL);
    cli_t *a = subscribe(&f, "head");
    bm_events_shutdown(f.ev);
    run_until(&f, chunk_ended, a);
    assert_int_equal(bm_events_stats(f.ev)->subscribers, 0);
    cli_t *b = cli_new(&f, "/eth/v1/events?topics=head", true);
    run_until(&f, cli_has_head, b);
    assert_int_equal(b->status, 503);
    fx_done(&f);
}

/* ---- the cluster head, from a real tracker ----------------------------------------------------
 */

#define GENESIS_MS 1700000000000ull
#define SLOT_MS 12000u
#define SPE 8u

static uint64_t at(uint64_t slot, uint64_t off)
{
    return GENESIS_MS + slot * SLOT_MS + off;
}

/* Block n of the test chain: root bytes n, state bytes 0x50+n, parent table below. */
static void root_of(int n, uint8_t r[32])
{
    memset(r, 0xB0 + n, 32);
}

static void hex_of(int n, uint8_t base, char out[BM_ROOT_HEX_LEN + 1])
{
    uint8_t r[32];
    memset(r, base + n, 32);
    bm_root_to_hex(r, out);
}

typedef struct blk {
    int n;
    uint64_t slot;
    int parent; /* -1: genesis-like, unknown */
} blk_t;

static const blk_t BLOCKS[] = {
    {0, 95, -1}, {1, 96, 0}, {2, 97, 1}, {3, 98, 1}, {4, 99, 2},
};

static void fetch(const uint8_t root[32], uint64_t slot, size_t node, void *ud)
{
    fx_t *f = ud;
    (void)slot;
    for (size_t i = 0; i < sizeof BLOCKS / sizeof BLOCKS[0]; i++) {
        uint8_t r[32];
        root_of(BLOCKS[i].n, r);
        if (memcmp(r, root, 32) == 0 && BLOCKS[i].parent >= 0) {
            uint8_t p[32];
            root_of(BLOCKS[i].parent, p);
            bm_head_on_parent(f->head, node, root, BLOCKS[i].slot, p, at(BLOCKS[i].slot, 100));
            return;
        }
    }
    bm_head_on_parent_failed(f->head, node, root, GENESIS_MS);
}

static void head_v2_data(int n, const char *status, bool optimistic, const char *version,
                         bm_str_t *s)
{
    char b[67], st[67], d1[67], d2[67];
    hex_of(n, 0xB0, b);
    hex_of(n, 0x50, st);
    hex_of(n, 0x20, d1);
    hex_of(n, 0x30, d2);
    bm_str_printf(s,
                  "{\"version\":\"%s\", \"data\":{\"slot\":\"%" PRIu64 "\", \"block\":\"%s\", "
                  "\"state\":\"%s\", \"payload_status\":\"%s\", \"epoch_transition\":false, "
                  "\"current_epoch_dependent_root\":\"%s\", \"next_epoch_dependent_root\":\"%s\", "
                  "\"execution_optimistic\":%s}}",
                  version, BLOCKS[n].slot, b, st, status, d1, d2, optimistic ? "true" : "false");
}

static void head_v1_data(int n, bool optimistic, bm_str_t *s)
{
    char b[67], st[67], d1[67], d2[67];
    hex_of(n, 0xB0, b);
    hex_of(n, 0x50, st);
    hex_of(n, 0x20, d1);
    hex_of(n, 0x30, d2);
    bm_str_printf(s,
                  "{\"slot\":\"%" PRIu64 "\",\"block\":\"%s\",\"state\":\"%s\","
                  "\"epoch_transition\":false,\"previous_duty_dependent_root\":\"%s\","
                  "\"current_duty_dependent_root\":\"%s\",\"execution_optimistic\":%s}",
                  BLOCKS[n].slot, b, st, d1, d2, optimistic ? "true" : "false");
}

/* Node `node` announces block n (head_v2 or head), optimistic or not, with or without data. */
static void announce(fx_t *f, size_t node, int n, bool v2, bool optimistic, bool with_raw,
                     const char *version)
{
    bm_str_t s = BM_STR_INIT;
    if (v2)
        head_v2_data(n, "empty", optimistic, version, &s);
    else
        head_v1_data(n, optimistic, &s);
    bm_head_event_t e = {.slot = BLOCKS[n].slot,
                         .optimistic = optimistic,
                         .payload = v2 ? BM_PAYLOAD_EMPTY : BM_PAYLOAD_UNKNOWN,
                         .topic = v2 ? BM_HEAD_TOPIC_HEAD_V2 : BM_HEAD_TOPIC_HEAD,
                         .raw = with_raw ? bm_str_data(&s) : NULL,
                         .raw_len = with_raw ? bm_str_len(&s) : 0};
    root_of(n, e.root);
    assert_int_equal(bm_head_on_head(f->head, node, &e, at(BLOCKS[n].slot, 200)), 0);
    bm_str_dispose(&s);
}

static void tracker_init(fx_t *f, bm_fork_t fork, bool with_nodes_raw)
{
    (void)with_nodes_raw;
    bm_head_opts_t ho;
    bm_head_opts_default(&ho);
    ho.quorum = 1;
    f->head = bm_head_new(2, &ho);
    assert_non_null(f->head);
    bm_head_set_fetch(f->head, fetch, f);
    bm_slot_clock_t ck = {GENESIS_MS, SLOT_MS, SPE};
    assert_int_equal(bm_head_set_clock(f->head, &ck, at(95, 0)), 0);
    bm_head_on_connect(f->head, 0, at(95, 0));
    bm_head_on_connect(f->head, 1, at(95, 0));
    assert_int_equal(bm_events_attach_head(f->ev, f->head), 0);
    bm_chain_info_t ci;
    memset(&ci, 0, sizeof ci);
    ci.known = true;
    ci.clock = ck;
    for (int k = 0; k < BM_FORK_NAMED; k++)
        ci.fork_epoch[k] = k <= (int)fork ? 0 : BM_FAR_FUTURE_EPOCH;
    bm_events_set_chain(f->ev, &ci);
}

/* Parses an event's data line, or fails. */
static struct json_object *data_of(cli_t *c, const char *topic, int k)
{
    static char d[8192];
    if (!event_data(c, topic, k, d, sizeof d))
        fail_msg("no %s event #%d in:\n%s", topic, k, bm_str_data(&c->body));
    struct json_object *o = NULL;
    assert_int_equal(bm_json_parse(d, strlen(d), 0, &o, NULL), 0);
    return o;
}

static void assert_str_at(struct json_object *o, const char *ptr, const char *want)
{
    const char *got = bm_json_get_str(o, ptr);
    if (!got || strcmp(got, want) != 0)
        fail_msg("%s: '%s', want '%s'", ptr, got ? got : "(none)", want);
}

static void test_heads_from_tracker(void **state)
{
    (void)state;
    fx_t f;
    fx_init(&f, NULL);
    tracker_init(&f, BM_FORK_FULU, true);
    cli_t *c = subscribe(&f, "head,head_v2,chain_reorg");
    cli_t *v2only = subscribe(&f, "head_v2");

    /* an optimistic head moves nothing and is never sent */
    announce(&f, 0, 0, true, true, true, "fulu");
    run_ready(&f);
    assert_int_equal(bm_events_stats(f.ev)->heads, 0);

    /* the first head (quorum 1): node 0's head_v2 data as is, head v1 synthesised from it */
    announce(&f, 0, 0, true, false, true, "fulu");
    wait_events(&f, c, "head_v2", 1);
    wait_events(&f, c, "head", 1);
    wait_events(&f, v2only, "head_v2", 1);
    char b[67], st[67], d1[67], d2[67];
    hex_of(0, 0xB0, b);
    hex_of(0, 0x50, st);
    hex_of(0, 0x20, d1);
    hex_of(0, 0x30, d2);
    struct json_object *o = data_of(c, "head", 0);
    assert_str_at(o, "/slot", "95");
    assert_str_at(o, "/block", b);
    assert_str_at(o, "/state", st);
    assert_str_at(o, "/previous_duty_dependent_root", d1); /* = current_epoch_dependent_root */
    assert_str_at(o, "/current_duty_dependent_root", d2);  /* = next_epoch_dependent_root */
    bool opt = true;
    assert_int_equal(bm_json_get_bool(o, "/execution_optimistic", &opt), 0);
    assert_false(opt);
    json_object_put(o);
    o = data_of(c, "head_v2", 0);
    assert_str_at(o, "/version", "fulu");
    assert_str_at(o, "/data/payload_status", "empty"); /* the node's data, as it said */
    json_object_put(o);

    /* node 1 announces the same head later: nothing more */
    announce(&f, 1, 0, true, false, true, "fulu");
    /* extension from node 1 alone, head v1 data only: head_v2 synthesised (before Gloas
     * the payload is in the block: "full"), head as the node sent it */
    announce(&f, 1, 1, false, false, true, NULL);
    wait_events(&f, c, "head", 2);
    wait_events(&f, c, "head_v2", 2);
    o = data_of(c, "head_v2", 1);
    hex_of(1, 0x20, d1);
    hex_of(1, 0x30, d2);
    assert_str_at(o, "/version", "fulu");
    assert_str_at(o, "/data/slot", "96");
    assert_str_at(o, "/data/payload_status", "full");
    assert_str_at(o, "/data/current_epoch_dependent_root", d1);
    assert_str_at(o, "/data/next_epoch_dependent_root", d2);
    json_object_put(o);
    assert_int_equal(count_events(c, "chain_reorg"), 0);

    /* node 0 extends to 2 (slot 97), then node 1 announces 3 (slot 98, parent 1): a
     * competing branch at a later slot wins (quorum 1): a re-org of depth 1 */
    announce(&f, 0, 1, true, false, true, "fulu");
    announce(&f, 0, 2, true, false, true, "fulu");
    wait_events(&f, c, "head", 3);
    announce(&f, 1, 3, true, false, true, "fulu");
    wait_events(&f, c, "head", 4);
    assert_int_equal(count_events(c, "chain_reorg"), 1);
    o = data_of(c, "chain_reorg", 0);
    char ob[67], os[67], nb[67], ns[67];
    hex_of(2, 0xB0, ob);
    hex_of(2, 0x50, os);
    hex_of(3, 0xB0, nb);
    hex_of(3, 0x50, ns);
    assert_str_at(o, "/slot", "98");
    assert_str_at(o, "/depth", "1");
    assert_str_at(o, "/old_head_block", ob);
    assert_str_at(o, "/old_head_state", os);
    assert_str_at(o, "/new_head_block", nb);
    assert_str_at(o, "/new_head_state", ns);
    assert_str_at(o, "/epoch", "12");
    json_object_put(o);
    /* the re-org comes before the head it leads to */
    const char *body = bm_str_data(&c->body);
    const char *r = strstr(body, "event: chain_reorg");
    const char *h4 = strstr(body, nb);
    assert_non_null(r);
    assert_non_null(h4);
    assert_true(r < h4);
    const bm_events_stats_t *stt = bm_events_stats(f.ev);
    assert_int_equal(stt->heads, 4);
    assert_int_equal(stt->reorgs, 1);
    assert_int_equal(count_events(v2only, "head_v2"), 4);
    assert_int_equal(count_events(v2only, "head"), 0);
    fx_done(&f);
}

static void test_reorg_uses_node_data(void **state)
{
    (void)state;
    fx_t f;
    fx_init(&f, NULL);
    tracker_init(&f, BM_FORK_FULU, true);
    cli_t *c = subscribe(&f, "chain_reorg");
    announce(&f, 0, 0, true, false, true, "fulu");
    announce(&f, 0, 1, true, false, true, "fulu");
    announce(&f, 0, 2, true, false, true, "fulu");
    /* node 1 says it re-orged 2 -> 3 before announcing 3 */
    char ob[67], nb[67], os[67], ns[67];
    hex_of(2, 0xB0, ob);
    hex_of(3, 0xB0, nb);
    hex_of(2, 0x50, os);
    hex_of(3, 0x50, ns);
    bm_str_t s = BM_STR_INIT;
    bm_str_printf(&s,
                  "{\"slot\":\"98\", \"depth\":\"1\", \"old_head_block\":\"%s\", "
                  "\"new_head_block\":\"%s\", \"old_head_state\":\"%s\", \"new_head_state\":\"%s\","
                  " \"epoch\":\"12\", \"execution_optimistic\":false}",
                  ob, nb, os, ns);
    bm_head_reorg_event_t re = {
        .slot = 98, .depth = 1, .raw = bm_str_data(&s), .raw_len = bm_str_len(&s)};
    root_of(2, re.old_head);
    root_of(3, re.new_head);
    assert_int_equal(bm_head_on_reorg(f.head, 1, &re, at(98, 150)), 0);
    announce(&f, 1, 3, true, false, true, "fulu");
    wait_events(&f, c, "chain_reorg", 1);
    char d[2048];
    assert_true(event_data(c, "chain_reorg", 0, d, sizeof d));
    /* the node's own data, compacted */
    bm_str_t want = BM_STR_INIT;
    assert_int_equal(bm_json_compact(bm_str_data(&s), bm_str_len(&s), &want, NULL), 0);
    assert_string_equal(d, bm_str_data(&want));
    bm_str_dispose(&want);
    bm_str_dispose(&s);
    fx_done(&f);
}

static void test_payload_full_second_head_v2(void **state)
{
    (void)state;
    fx_t f;
    fx_init(&f, NULL);
    tracker_init(&f, BM_FORK_GLOAS, true);
    cli_t *c = subscribe(&f, "head_v2,head");
    announce(&f, 0, 0, true, false, true, "gloas");
    wait_events(&f, c, "head_v2", 1);
    /* the payload arrives (execution_payload_available from a trusted node) */
    uint8_t r[32];
    root_of(0, r);
    assert_int_equal(bm_head_on_payload_available(f.head, 1, 95, r, at(95, 1500)), 0);
    wait_events(&f, c, "head_v2", 2);
    struct json_object *o = data_of(c, "head_v2", 0);
    assert_str_at(o, "/data/payload_status", "empty");
    json_object_put(o);
    o = data_of(c, "head_v2", 1);
    assert_str_at(o, "/version", "gloas");
    assert_str_at(o, "/data/payload_status", "full");
    assert_str_at(o, "/data/slot", "95");
    json_object_put(o);
    /* said again: no third */
    assert_int_equal(bm_head_on_payload_available(f.head, 0, 95, r, at(95, 1600)), 0);
    run_ready(&f);
    assert_int_equal(count_events(c, "head_v2"), 2);
    assert_int_equal(count_events(c, "head"), 1); /* head (v1) has no payload status */
    assert_int_equal(bm_events_stats(f.ev)->payload_heads, 1);

    /* in Gloas a head known only from `head` is "empty" until the payload is known */
    announce(&f, 1, 1, false, false, true, NULL);
    wait_events(&f, c, "head_v2", 3);
    o = data_of(c, "head_v2", 2);
    assert_str_at(o, "/version", "gloas");
    assert_str_at(o, "/data/payload_status", "empty");
    json_object_put(o);
    fx_done(&f);
}

static void test_head_without_data_waits(void **state)
{
    (void)state;
    fx_t f;
    fx_init(&f, NULL);
    tracker_init(&f, BM_FORK_FULU, true);
    cli_t *c = subscribe(&f, "head,head_v2");
    /* the tracker moves on a head without event data (a reconnect's header fetch) */
    announce(&f, 0, 0, true, false, false, "fulu");
    run_ready(&f);
    bm_head_info_t hi;
    assert_true(bm_head_cluster(f.head, &hi));
    assert_int_equal(count_events(c, "head"), 0);
    /* an optimistic copy of the data does not do */
    bm_str_t s = BM_STR_INIT;
    head_v2_data(0, "empty", true, "fulu", &s);
    bm_events_node_text(1, "head_v2", bm_str_data(&s), bm_str_len(&s), f.ev);
    run_ready(&f);
    assert_int_equal(count_events(c, "head"), 0);
    bm_str_clear(&s);
    /* a trusted node's data for that root: out it goes, once */
    head_v2_data(0, "empty", false, "fulu", &s);
    bm_events_node_text(1, "head_v2", bm_str_data(&s), bm_str_len(&s), f.ev);
    bm_events_node_text(0, "head_v2", bm_str_data(&s), bm_str_len(&s), f.ev);
    wait_events(&f, c, "head_v2", 1);
    wait_events(&f, c, "head", 1);
    run_ready(&f);
    assert_int_equal(count_events(c, "head_v2"), 1);
    assert_int_equal(count_events(c, "head"), 1);
    bm_str_dispose(&s);
    fx_done(&f);
}

static void test_untrusted_node_chain_events(void **state)
{
    (void)state;
    fx_t f;
    fx_init(&f, NULL);
    tracker_init(&f, BM_FORK_FULU, true);
    cli_t *c = subscribe(&f, "block,attestation");
    /* node 1 is not allowed to vote (health said so): its chain events do not count */
    bm_head_set_node_vote(f.head, 1, false);
    bm_events_node_text(1, "block", BLOCK_A, strlen(BLOCK_A), f.ev);
    const char *att = "{\"aggregation_bits\":\"0x01\",\"signature\":\"0x02\"}";
    bm_events_node_text(1, "attestation", att, strlen(att), f.ev); /* gossip: fine */
    wait_events(&f, c, "attestation", 1);
    run_ready(&f);
    assert_int_equal(count_events(c, "block"), 0);
    bm_events_node_text(0, "block", BLOCK_A, strlen(BLOCK_A), f.ev);
    wait_events(&f, c, "block", 1);
    assert_int_equal(bm_events_stats(f.ev)->untrusted, 1);
    fx_done(&f);
}

/* A shadow node (the tracker's observer) is never heard on the cluster stream, not even its
 * gossip, and its copies take no place in the dedup window: the first serving node's copy
 * of the same event is the one that goes out. */
static void test_shadow_node_events_left_out(void **state)
{
    (void)state;
    fx_t f;
    fx_init(&f, NULL);
    tracker_init(&f, BM_FORK_FULU, true);
    cli_t *c = subscribe(&f, "block,attestation");
    bm_head_set_node_observer(f.head, 1, true);
    const char *att = "{\"aggregation_bits\":\"0x01\",\"signature\":\"0x02\"}";
    bm_events_node_text(1, "attestation", att, strlen(att), f.ev);
    bm_events_node_text(1, "block", BLOCK_A, strlen(BLOCK_A), f.ev);
    run_ready(&f);
    assert_int_equal(count_events(c, "attestation"), 0);
    assert_int_equal(count_events(c, "block"), 0);
    assert_int_equal(bm_events_stats(f.ev)->shadow_events, 2);
    assert_int_equal(bm_events_stats(f.ev)->duplicates, 0);
    bm_events_node_text(0, "attestation", att, strlen(att), f.ev);
    bm_events_node_text(0, "block", BLOCK_A, strlen(BLOCK_A), f.ev);
    wait_events(&f, c, "attestation", 1);
    wait_events(&f, c, "block", 1);
    assert_int_equal(bm_events_stats(f.ev)->duplicates, 0);
    fx_done(&f);
}

/* With many subscribers, other topics wait (briefly) for the head, to leave with it. */
static void test_coalesce_with_the_head(void **state)
{
    (void)state;
    bm_events_opts_t o;
    bm_events_opts_default(&o);
    o.coalesce_min_subscribers = 2;
    o.coalesce_ms = 300;
    fx_t f;
    fx_init(&f, &o);
    tracker_init(&f, BM_FORK_FULU, true);
    cli_t *a = subscribe(&f, "head,block");
    /* one subscriber: nothing is held */
    bm_events_node_text(0, "block", BLOCK_A, strlen(BLOCK_A), f.ev);
    wait_events(&f, a, "block", 1);
    cli_t *b = subscribe(&f, "head,block");
    const char *blk = "{\"slot\":\"95\",\"block\":\"0x01\",\"execution_optimistic\":false}";
    bm_events_node_text(0, "block", blk, strlen(blk), f.ev);
    run_ready(&f);
    assert_int_equal(count_events(b, "block"), 0); /* held */
    announce(&f, 0, 0, true, false, true, "fulu");
    wait_events(&f, b, "head", 1);
    /* released with the head, before it, in one go */
    assert_int_equal(count_events(b, "block"), 1);
    assert_true(strstr(bm_str_data(&b->body), "event: block") <
                strstr(bm_str_data(&b->body), "event: head"));
    assert_int_equal(count_events(a, "block"), 2);
    /* no head follows: released when the hold ends (300 ms), not a millisecond before */
    const char *blk2 = "{\"slot\":\"96\",\"block\":\"0x02\",\"execution_optimistic\":false}";
    bm_events_node_text(0, "block", blk2, strlen(blk2), f.ev);
    run_ready(&f);
    assert_int_equal(count_events(b, "block"), 1);
    bm_clock_manual_advance(f.clock, 299);
    run_ready(&f);
    assert_int_equal(count_events(b, "block"), 1);
    bm_clock_manual_advance(f.clock, 1);
    wait_events(&f, b, "block", 2);
    fx_done(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_topic_names),
        cmocka_unit_test(test_parse_topics_forms),
        cmocka_unit_test(test_parse_topics_errors),
        cmocka_unit_test(test_serialise_format),
        cmocka_unit_test(test_route_400s),
        cmocka_unit_test(test_headers_at_once),
        cmocka_unit_test(test_fanout_one_buffer),
        cmocka_unit_test(test_node_events_filtered),
        cmocka_unit_test(test_dedup_window_bounded),
        cmocka_unit_test(test_slow_subscriber_dropped),
        cmocka_unit_test(test_keepalive),
        cmocka_unit_test(test_shutdown_ends_streams),
        cmocka_unit_test(test_heads_from_tracker),
        cmocka_unit_test(test_reorg_uses_node_data),
        cmocka_unit_test(test_payload_full_second_head_v2),
        cmocka_unit_test(test_head_without_data_waits),
        cmocka_unit_test(test_untrusted_node_chain_events),
        cmocka_unit_test(test_shadow_node_events_left_out),
        cmocka_unit_test(test_coalesce_with_the_head),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
