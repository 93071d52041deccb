/* SPDX-License-Identifier: MIT */
/*
 * test_upstream: the behaviour of bm_upstream (requests, header rules, streaming, pause,
 * cancel and free from callbacks, connection reuse, credentials, limits), against the
 * scripted server of upstream_fx.h. Every test runs twice: with the native HTTP/1.1
 * client and with libcurl carrying http://, which must behave the same.
 */
#include "upstream_fx.h"

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
    hdrs_of(&h, (const char *const[][2]){
                    {"Accept", "application/octet-stream"},
                    {"Content-Type", "application/octet-stream"},
                    {"Eth-Consensus-Version", "electra"},
                    {"Eth-Execution-Payload-Blinded", "true"},
                    {"Eth-Execution-Payload-Value", "115792089237316195423570985008687907853"},
                    {"Eth-Consensus-Block-Value", "1"},
                    {NULL},
                });
    bm_xfer_req_t q = req_get(url(f, "/ssz"));
    q.method = "POST";
    q.headers = &h;
    q.body = body;
    start_and_finish(f, &r, &q, 3000);
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
    bm_hdrs_init(&extra);
    hdrs_of(&h, (const char *const[][2]){
                    {"Accept-Encoding", "gzip, br"},
                    {"Connection", "keep-alive, X-Hop"},
                    {"X-Hop", "1"},
                    {"Keep-Alive", "timeout=5"},
                    {"TE", "trailers"},
                    {"Trailer", "X-Sum"},
                    {"Upgrade", "h2c"},
                    {"Proxy-Authorization", "Basic Zm9vOmJhcg=="},
                    {"Proxy-Connection", "keep-alive"},
                    {"Expect", "100-continue"},
                    {"Host", "evil.example"},
                    {"Content-Length", "999"},
                    {"Transfer-Encoding", "chunked"},
                    {"X-Keep", "yes"},
                    {"X-Empty", ""},
                    {NULL},
                });
    bm_hdrs_add_z(&extra, "X-Api-Key", "k3y");
    bm_hdrs_add_z(&extra, "Accept-Encoding", "deflate");
    bm_buf_t *body = bm_buf_from_str("{\"a\":1}");
    bm_xfer_req_t q = req_get(url(f, "/echo"));
    q.method = "POST";
    q.headers = &h;
    q.extra = &extra;
    q.body = body;
    start_and_finish(f, &r, &q, 3000);
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

/* The operator's fields for a node replace the client's of the same name (whatever the
 * case), and a client's word on where the request came from is never passed on. */
static void test_node_fields_replace_the_callers(void **state)
{
    fx_t *f = *state;
    rec_t r;
    rec_init(&r, f);
    bm_hdrs_t h, extra;
    bm_hdrs_init(&extra);
    hdrs_of(&h, (const char *const[][2]){
                    {"x-api-key", "client-key"},
                    {"X-Forwarded-For", "10.9.9.9"},
                    {"Forwarded", "for=10.9.9.9"},
                    {"X-Real-IP", "10.9.9.9"},
                    {"X-Other", "kept"},
                    {NULL},
                });
    bm_hdrs_add_z(&extra, "X-Api-Key", "operator-key");
    bm_xfer_req_t q = req_get(url(f, "/echo"));
    q.headers = &h;
    q.extra = &extra;
    start_and_finish(f, &r, &q, 3000);
    assert_int_equal(r.err, 0);
    sreq_t *s = &f->srv.reqs[0];
    assert_int_equal(count_fields(s, "X-Api-Key"), 1);
    assert_string_equal(bm_hdrs_get(&s->h, "X-Api-Key"), "operator-key");
    assert_int_equal(count_fields(s, "X-Forwarded-For"), 0);
    assert_int_equal(count_fields(s, "Forwarded"), 0);
    assert_int_equal(count_fields(s, "X-Real-IP"), 0);
    assert_string_equal(bm_hdrs_get(&s->h, "X-Other"), "kept");
    /* a node that opted in is told the client's address by beaconmux, once */
    rec_t r2; /* a record per transfer: each holds its own answer */
    rec_init(&r2, f);
    q.forwarded_for = "192.0.2.7";
    start_and_finish(f, &r2, &q, 3000);
    assert_int_equal(r2.err, 0);
    s = &f->srv.reqs[1];
    assert_int_equal(count_fields(s, "X-Forwarded-For"), 1);
    assert_string_equal(bm_hdrs_get(&s->h, "X-Forwarded-For"), "192.0.2.7");
    assert_int_equal(count_fields(s, "Forwarded"), 0);
    q.forwarded_for = "192.0.2.7\r\nX-Evil: 1"; /* never a second field */
    assert_null(start(f, &r2, &q));
    bm_hdrs_dispose(&h);
    bm_hdrs_dispose(&extra);
    rec_dispose(&r2);
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
    start_and_finish(f, &r, &q, 5000);
    assert_int_equal(r.err, 0);
    assert_int_equal(r.status, 200);
    sreq_t *s = &f->srv.reqs[0];
    assert_null(bm_hdrs_get(&s->h, "Expect"));
    assert_int_equal(bm_str_len(&s->body), n);
    assert_memory_equal(bm_str_data(&s->body), body->data, n);
    /* The client never waited in the middle of the request (libcurl's wait for a 100
     * Continue is 1 s, between the head and the body). Judged by the node's longest
     * silence between two reads of the request, not by the transfer's whole time: a
     * sanitizer build beside busy CPUs may take longer than 500 ms to copy 2 MiB without
     * ever pausing. */
    assert_true(s->longest_wait_ms < 500);
    bm_buf_unref(body);
    bm_hdrs_dispose(&h);
    rec_dispose(&r);
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
    start_and_finish(f, &r, &q, 3000);
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
    start_and_finish(f, &r, &q, 3000);
    assert_int_equal(r.err, BM_ETIMEDOUT);
    assert_int_equal(r.status, 0);
    assert_int_equal(r.heads, 0);
    assert_true(r.elapsed_us >= 200 * 1000); /* never early, whatever the loop did before */
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
    start_and_finish(f, &r, &q, 3000);
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
    start_and_finish(f, &r, &q, 3000);
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

static void run_pause_resume(fx_t *f, int mode)
{
    rec_t r;
    rec_init(&r, f);
    r.pause_mode = mode;
    /* 1 MiB in one burst: far more than one read, so libcurl must hold bytes while paused. */
    bm_xfer_req_t q = req_get(url(f, "/stream?n=256&size=4096&ms=0"));
    q.stream = true;
    q.idle_timeout_ms = 60;
    start_and_finish(f, &r, &q, 10000);
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

/* A pause asked when a piece of a Content-Length body used up its whole read: nothing is left
 * to hold, and the transfer goes on at the resume (the native client once passed a NULL
 * hold buffer to memmove there, which the sanitizer build aborts on). */
static void test_pause_at_the_end_of_a_read(void **state)
{
    fx_t *f = *state;
    rec_t r;
    rec_init(&r, f);
    r.pause_mode = 1;
    bm_xfer_req_t q = req_get(url(f, "/big?n=300000&chunked=0"));
    q.stream = true;
    start_and_finish(f, &r, &q, 10000);
    assert_int_equal(r.dones, 1);
    assert_int_equal(r.err, 0);
    check_pattern(&r, 300000);
    assert_true(r.pauses >= 1);
    RUN_UNTIL(&f->loop, !r.paused, 1000);
    rec_dispose(&r);
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
    start_and_finish(f, &r, &q, 3000);
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
        start_and_finish(f, &r, &q, 3000);
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
    start_and_finish(f, &r, &q, 3000);
    assert_int_equal(r.err, 0);
    assert_string_equal(bm_hdrs_get(&f->srv.reqs[0].h, "Authorization"), "Basic dXNlcjpzM2NyZXQ=");
    assert_int_equal(count_fields(&f->srv.reqs[0], "Authorization"), 1);
    rec_dispose(&r);

    /* A lone token as user name. */
    rec_init(&r, f);
    snprintf(u, sizeof u, "http://tok3n@127.0.0.1:%d/auth", f->srv.port);
    q = req_get(u);
    start_and_finish(f, &r, &q, 3000);
    assert_int_equal(r.err, 0);
    assert_string_equal(bm_hdrs_get(&f->srv.reqs[1].h, "Authorization"), "Basic dG9rM246");
    rec_dispose(&r);

    /* Without credentials in the URL the client's Authorization passes. */
    rec_init(&r, f);
    q = req_get(url(f, "/auth"));
    q.headers = &h;
    start_and_finish(f, &r, &q, 3000);
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
        start_and_finish(f, &r, &q, 3000);
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
        start_and_finish(f, &r, &q, 3000);
        if (r.err != cases[i].err)
            fail_msg("%s: err %d, want %d (%s)", cases[i].path, r.err, cases[i].err, r.detail);
        if (cases[i].err == 0) {
            check_pattern_body(&r, 1000);
        } else {
            assert_null(r.body);
        }
        rec_dispose(&r);
    }
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
    RUN_UNTIL(&f->loop, dones_of(r, N) == N, 10000);
    assert_int_equal(dones_of(r, N), N);
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
    fx_opts(&o);
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
    start_and_finish(f, &r, &q, 3000);
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
    start_and_finish(f, &r, &q, 3000);
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
    start_and_finish(f, &r, &q, 3000);
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
    start_and_finish(f, &r, &q, 3000);
    assert_int_equal(r.err, 0);
    assert_true(body_is(&r, "payload", 7));
    assert_string_equal(f->srv.reqs[2].method, "PUT");
    assert_int_equal(count_fields(&f->srv.reqs[2], "Content-Type"), 0);
    bm_buf_unref(body);
    rec_dispose(&r);

    rec_init(&r, f);
    q = req_get(url(f, "/thing"));
    q.method = "DELETE";
    start_and_finish(f, &r, &q, 3000);
    assert_int_equal(r.err, 0);
    assert_string_equal(f->srv.reqs[3].method, "DELETE");
    rec_dispose(&r);

    /* POST without a body sends Content-Length: 0. */
    rec_init(&r, f);
    q = req_get(url(f, "/echo"));
    q.method = "POST";
    start_and_finish(f, &r, &q, 3000);
    assert_int_equal(r.err, 0);
    assert_string_equal(bm_hdrs_get(&f->srv.reqs[4].h, "Content-Length"), "0");
    rec_dispose(&r);

    /* The method sent is always the caller's: a GET with a body stays a GET (libcurl turns
     * a request with POSTFIELDS into a POST unless told otherwise), its body sent along. */
    rec_init(&r, f);
    body = bm_buf_from_str("{\"x\":1}");
    q = req_get(url(f, "/echo"));
    q.body = body;
    start_and_finish(f, &r, &q, 3000);
    assert_int_equal(r.err, 0);
    assert_string_equal(f->srv.reqs[5].method, "GET");
    assert_string_equal(bm_str_data(&f->srv.reqs[5].body), "{\"x\":1}");
    bm_buf_unref(body);
    rec_dispose(&r);
    /* ... and the next request on the same handle is a plain GET again */
    rec_init(&r, f);
    q = req_get(url(f, "/hello"));
    start_and_finish(f, &r, &q, 3000);
    assert_int_equal(r.err, 0);
    assert_string_equal(f->srv.reqs[6].method, "GET");
    assert_null(bm_hdrs_get(&f->srv.reqs[6].h, "Content-Length"));
    rec_dispose(&r);
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
    RUN_UNTIL(&f->loop, bm_list_empty(&f->srv.conns), 3000);
    assert_true(bm_list_empty(&f->srv.conns));
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
    fx_opts(&o);
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

/* A node's bound holds on both transports: a burst of transfers never opens more than the
 * bound's connections to it, so no more than that stay open idle after the burst (libcurl
 * kept one per concurrent transfer, up to 256, before CURLMOPT_MAX_HOST_CONNECTIONS was set
 * from the node's bound). */
static void test_node_bound_caps_connections(void **state)
{
    fx_t *f = *state;
    assert_int_equal(bm_upstream_set_node_limit(f->up, f->base, 3), 0);
    enum { N = 12 };
    rec_t r[N];
    start_burst(f, r, N, "/stream?n=2&size=10&ms=20");
    RUN_UNTIL(&f->loop, dones_of(r, N) == N, 5000);
    for (int i = 0; i < N; i++) {
        assert_int_equal(r[i].err, 0);
        rec_dispose(&r[i]);
    }
    assert_int_equal(f->srv.nreqs, N);
    assert_true(f->srv.max_open <= 3);
    assert_true(f->srv.open_now <= 3); /* the idle ones left after the burst */
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)
    const struct CMUnitTest tests[] = {
        T(test_get_buffered),
        T(test_post_json),
        T(test_ssz_both_ways),
        T(test_request_header_hygiene),
        T(test_node_fields_replace_the_callers),
        T(test_big_post_no_expect_stall),
        T(test_connection_refused),
        T(test_timeout_no_answer),
        T(test_close_mid_body),
        T(test_idle_timeout_stream),
        T(test_stream_pause_resume),
        T(test_stream_pause_api),
        T(test_pause_at_the_end_of_a_read),
        T(test_pause_edges),
        T(test_cancel_in_own_on_data),
        T(test_cancel_other_in_on_data),
        T(test_cancel_in_flight),
        T(test_start_from_callbacks),
        T(test_connection_reuse),
        T(test_credentials),
        T(test_too_big),
        T(test_many_concurrent),
        T(test_node_bound_caps_connections),
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
    int failed =
        cmocka_run_group_tests_name("upstream: native http:// client", tests, use_native, NULL);
    failed += cmocka_run_group_tests_name("upstream: libcurl for http://", tests, use_curl, NULL);
    return failed;
}
