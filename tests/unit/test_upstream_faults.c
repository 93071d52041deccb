/* SPDX-License-Identifier: MIT */
/*
 * test_upstream_faults: what bm_upstream makes of nodes that misbehave or answer in the
 * rarer shapes HTTP/1.1 allows: closing mid-head or mid-body, lying chunk sizes, oversized
 * heads, interim responses nobody asked for, folded fields, bodies delimited by the close,
 * resets on fresh and on reused connections, a node that answers before reading the body.
 * Every test runs on the native client and on libcurl: both must report the same.
 */
#include "upstream_fx.h"

/* Runs a GET of `path` to completion into `r` (initialised here; the caller disposes it). */
static void get(fx_t *f, rec_t *r, const char *path)
{
    rec_init(r, f);
    bm_xfer_req_t q = req_get(url(f, path));
    assert_non_null(start(f, r, &q));
    RUN_UNTIL(&f->loop, r->dones, 5000);
    assert_int_equal(r->dones, 1);
}

static void test_close_mid_head(void **state)
{
    fx_t *f = *state;
    rec_t r;
    get(f, &r, "/midhead");
    if (r.err != BM_ECONNRESET)
        fail_msg("err %d status %d heads %d (%s)", r.err, r.status, r.heads, r.detail);
    assert_int_equal(r.status, 0);
    assert_int_equal(r.heads, 0);
    assert_null(r.body);
    assert_true(r.detail[0] != '\0');
    rec_dispose(&r);
}

static void test_chunk_size_lies(void **state)
{
    fx_t *f = *state;
    /* Says 5, sends 11: the bytes after the fifth are not a chunk boundary. */
    rec_t r;
    get(f, &r, "/chunklie?c=short");
    assert_int_equal(r.err, BM_ECONNRESET);
    assert_int_equal(r.heads, 1);
    assert_int_equal(r.status, 200);
    assert_null(r.body);
    rec_dispose(&r);
    /* Says 0x40, sends 5 and the last chunk, then closes: the body ends early. */
    get(f, &r, "/chunklie?c=long");
    assert_int_equal(r.err, BM_ECONNRESET);
    assert_int_equal(r.status, 200);
    assert_null(r.body);
    rec_dispose(&r);
}

static void test_head_size_limit(void **state)
{
    fx_t *f = *state;
    rec_t r;
    get(f, &r, "/longhead?kb=60"); /* 60 KiB of fields: within the 64 KiB */
    assert_int_equal(r.err, 0);
    assert_int_equal(r.status, 200);
    assert_non_null(bm_hdrs_get(&r.hdrs, "X-Pad-0059"));
    assert_true(body_is(&r, "ok", 2));
    rec_dispose(&r);
    get(f, &r, "/longhead?kb=70");
    assert_int_equal(r.err, BM_EPROTO);
    assert_int_equal(r.heads, 0);
    assert_int_equal(r.status, 0);
    assert_non_null(strstr(r.detail, "64 KiB"));
    rec_dispose(&r);
}

static void test_interim_responses(void **state)
{
    fx_t *f = *state;
    rec_t r;
    get(f, &r, "/continue"); /* 100 Continue unasked: skipped */
    assert_int_equal(r.err, 0);
    assert_int_equal(r.heads, 1);
    assert_int_equal(r.status, 200);
    assert_true(body_is(&r, "ok", 2));
    rec_dispose(&r);
    /* 101 and an unassigned 1xx, or a control byte in a field: the node broke the exchange */
    static const char *const bad[] = {"/switch", "/interim199", "/ctlvalue"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        get(f, &r, bad[i]);
        if (r.err != BM_EPROTO)
            fail_msg("%s: err %d (%s)", bad[i], r.err, r.detail);
        assert_int_equal(r.heads, 0);
        assert_int_equal(r.status, 0);
        rec_dispose(&r);
    }
}

static void test_response_shapes(void **state)
{
    fx_t *f = *state;
    rec_t r;
    /* obs-fold: the continuation joins the value with one space */
    get(f, &r, "/fold");
    assert_int_equal(r.err, 0);
    assert_string_equal(bm_hdrs_get(&r.hdrs, "X-Fold"), "a b");
    rec_dispose(&r);
    /* trailer fields are not head fields */
    get(f, &r, "/trailers");
    assert_int_equal(r.err, 0);
    assert_true(body_is(&r, "abc", 3));
    assert_null(bm_hdrs_get(&r.hdrs, "X-Sum"));
    rec_dispose(&r);
    /* 204 has no body whatever its Content-Length says, and the connection goes on */
    int accepts = f->srv.accepts;
    get(f, &r, "/nocontent");
    assert_int_equal(r.err, 0);
    assert_int_equal(r.status, 204);
    assert_string_equal(bm_hdrs_get(&r.hdrs, "X-N"), "1");
    assert_non_null(r.body);
    assert_int_equal(r.body->len, 0);
    rec_dispose(&r);
    get(f, &r, "/hello");
    assert_int_equal(r.err, 0);
    assert_int_equal(f->srv.accepts, accepts);
    assert_int_equal(f->srv.reqs[f->srv.nreqs - 1].conn_id, f->srv.reqs[f->srv.nreqs - 2].conn_id);
    rec_dispose(&r);
    /* a body delimited by the close; the next request needs a new connection */
    get(f, &r, "/closedelim");
    assert_int_equal(r.err, 0);
    assert_true(body_is(&r, "until the close", 15));
    rec_dispose(&r);
    get(f, &r, "/hello");
    assert_int_equal(r.err, 0);
    assert_int_equal(f->srv.accepts, accepts + 1);
    rec_dispose(&r);
}

/*
 * A Content-Length that cannot be (past 2^63, not a number, repeated, next to chunked) is a
 * failure of the node, never an answer: buffered or streamed, the transfer fails BM_EPROTO
 * before any head reaches the owner (libcurl alone read the bytes to the close and reported
 * a complete two-byte answer for an overflowing length when streaming).
 */
static void test_bad_content_length(void **state)
{
    fx_t *f = *state;
    char path[64];
    for (size_t v = 0; v < sizeof bad_lengths / sizeof bad_lengths[0]; v++) {
        for (int stream = 0; stream <= 1; stream++) {
            snprintf(path, sizeof path, "/badlength?v=%zu", v);
            rec_t r;
            rec_init(&r, f);
            bm_xfer_req_t q = req_get(url(f, path));
            q.stream = stream;
            start_and_finish(f, &r, &q, 5000);
            assert_int_equal(r.dones, 1);
            if (r.err != BM_EPROTO || r.heads != 0 || r.datas != 0)
                fail_msg("%s (%s, %s): err %d (%s) status %d heads %d data %zu", path,
                         bad_lengths[v], stream ? "streamed" : "buffered", r.err, r.detail,
                         r.status, r.heads, bm_str_len(&r.data));
            assert_int_equal(r.status, 0);
            assert_null(r.body);
            rec_dispose(&r);
        }
    }
    /* a body shorter than announced: the exchange broke, streamed as well */
    rec_t r;
    rec_init(&r, f);
    bm_xfer_req_t q = req_get(url(f, "/partial"));
    q.stream = true;
    start_and_finish(f, &r, &q, 5000);
    assert_int_equal(r.err, BM_ECONNRESET);
    assert_int_equal(r.status, 200);
    rec_dispose(&r);
}

/* A URL whose port cannot be: the transfer starts and fails, it is not refused at once. */
static void test_malformed_port(void **state)
{
    fx_t *f = *state;
    rec_t r;
    rec_init(&r, f);
    bm_xfer_req_t q = req_get("http://127.0.0.1:99999/x");
    start_and_finish(f, &r, &q, 3000);
    assert_int_equal(r.err, BM_EINVAL);
    assert_int_equal(r.heads, 0);
    assert_true(r.detail[0] != '\0');
    rec_dispose(&r);
}

static void test_reset_on_fresh_connection(void **state)
{
    fx_t *f = *state;
    rec_t r;
    get(f, &r, "/reset");
    assert_int_equal(r.err, BM_ECONNRESET);
    assert_int_equal(r.status, 0);
    assert_int_equal(f->srv.nreqs, 1); /* a fresh connection is not retried */
    rec_dispose(&r);
}

static void test_reset_on_reused_connection_retried(void **state)
{
    fx_t *f = *state;
    rec_t r;
    get(f, &r, "/hello");
    assert_int_equal(r.err, 0);
    rec_dispose(&r);
    /* The node resets the kept-alive connection on the next request: sent again, once,
     * on a fresh connection. */
    get(f, &r, "/reset-reused");
    assert_int_equal(r.err, 0);
    assert_true(body_is(&r, "fresh", 5));
    assert_int_equal(f->srv.nreqs, 3);
    assert_int_equal(f->srv.accepts, 2);
    assert_int_equal(f->srv.reqs[1].conn_id, f->srv.reqs[0].conn_id);
    assert_true(f->srv.reqs[2].conn_id != f->srv.reqs[1].conn_id);
    rec_dispose(&r);

    /* A POST too (a submission must not be lost to a keep-alive race): same body again. */
    rec_init(&r, f);
    bm_buf_t *body = bm_buf_from_str("[{\"index\":\"1\"}]");
    bm_xfer_req_t q = req_get(url(f, "/reset-reused"));
    q.method = "POST";
    q.body = body;
    start_and_finish(f, &r, &q, 5000);
    assert_int_equal(r.err, 0);
    assert_int_equal(f->srv.nreqs, 5);
    assert_string_equal(f->srv.reqs[4].method, "POST");
    assert_string_equal(bm_str_data(&f->srv.reqs[4].body), "[{\"index\":\"1\"}]");
    assert_true(f->srv.reqs[4].conn_id != f->srv.reqs[3].conn_id);
    bm_buf_unref(body);
    rec_dispose(&r);

    /* Reset again on the fresh connection: no second retry. */
    get(f, &r, "/reset");
    assert_int_equal(r.err, BM_ECONNRESET);
    assert_int_equal(f->srv.nreqs, 7);
    rec_dispose(&r);
}

static void run_early_answer(fx_t *f, const char *path)
{
    rec_t r;
    rec_init(&r, f);
    size_t n = 8u << 20; /* far more than the socket buffers hold */
    bm_buf_t *body = bm_buf_new(n);
    memset(body->data, 'x', n);
    body->len = n;
    bm_xfer_req_t q = req_get(url(f, path));
    q.method = "POST";
    q.body = body;
    q.timeout_ms = 10000;
    start_and_finish(f, &r, &q, 10000);
    assert_int_equal(r.dones, 1);
    if (r.err != 0)
        fail_msg("%s: err %d (%s) status %d heads %d data %zu", path, r.err, r.detail, r.status,
                 r.heads, r.body ? r.body->len : 0);
    assert_int_equal(r.status, 413);
    assert_true(body_is(&r, "large", 5));
    bm_buf_unref(body);
    rec_dispose(&r);
}

/*
 * The node answers 413 as soon as it has the head, then reads the body to its end, or
 * drops the connection with the body unread (the kernel sends a reset). The native client
 * reads the answer that came before the reset; libcurl 7.88 stops at the failed send and
 * reports "Send failure: Connection reset by peer" without reading it, so that case runs
 * on the native transport only (docs/upstream.md).
 */
static void test_answer_before_body_read(void **state)
{
    fx_t *f = *state;
    run_early_answer(f, "/early413?close=0");
    if (!g_via_curl)
        run_early_answer(f, "/early413?close=1");
    /* and the client goes on with a new connection */
    rec_t r;
    get(f, &r, "/hello");
    assert_int_equal(r.err, 0);
    rec_dispose(&r);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)
    const struct CMUnitTest tests[] = {
        T(test_close_mid_head),
        T(test_chunk_size_lies),
        T(test_head_size_limit),
        T(test_interim_responses),
        T(test_response_shapes),
        T(test_bad_content_length),
        T(test_malformed_port),
        T(test_reset_on_fresh_connection),
        T(test_reset_on_reused_connection_retried),
        T(test_answer_before_body_read),
    };
#undef T
    int failed = cmocka_run_group_tests_name("upstream faults: native http:// client", tests,
                                             use_native, NULL);
    failed +=
        cmocka_run_group_tests_name("upstream faults: libcurl for http://", tests, use_curl, NULL);
    return failed;
}
