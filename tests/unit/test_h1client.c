/* SPDX-License-Identifier: MIT */
/*
 * test_h1client: what only the native http:// client has, against the scripted server of
 * upstream_fx.h: the pool of a node (its bound, transfers waiting for a turn and timing
 * out or cancelled there, last-in-first-out reuse, a connection replaced after its
 * request cap, an idle connection closed), a connection opened for a transfer cancelled
 * while it connected, a host name resolved and its addresses tried in turn.
 */
#include "upstream_fx.h"

/* A client with `mod` applied to the native transport's options. */
static void reopen(fx_t *f, void (*mod)(bm_upstream_opts_t *o))
{
    bm_upstream_free(f->up);
    bm_upstream_opts_t o;
    fx_opts(&o);
    if (mod)
        mod(&o);
    f->up = bm_upstream_new(&f->loop, &o);
    assert_non_null(f->up);
}

static void test_pool_bound_and_turns(void **state)
{
    fx_t *f = *state;
    assert_int_equal(bm_upstream_set_node_limit(f->up, f->base, 2), 0);
    enum { N = 6 };
    rec_t r[N];
    start_burst(f, r, N, "/stream?n=2&size=10&ms=20");
    assert_int_equal(bm_upstream_active(f->up), N); /* the waiting ones count too */
    RUN_UNTIL(&f->loop, dones_of(r, N) == N, 5000);
    for (int i = 0; i < N; i++) {
        assert_int_equal(r[i].err, 0);
        check_pattern_body(&r[i], 20);
        rec_dispose(&r[i]);
    }
    /* never more than two at once, and the two were reused for the four others */
    assert_int_equal(f->srv.max_open, 2);
    assert_int_equal(f->srv.accepts, 2);
    assert_int_equal(f->srv.nreqs, N);
}

static void test_waiting_transfer_times_out_or_is_cancelled(void **state)
{
    fx_t *f = *state;
    assert_int_equal(bm_upstream_set_node_limit(f->up, f->base, 1), 0);
    rec_t busy, late, gone;
    rec_init(&busy, f);
    rec_init(&late, f);
    rec_init(&gone, f);
    bm_xfer_req_t q = req_get(url(f, "/silent"));
    assert_non_null(start(f, &busy, &q));
    q = req_get(url(f, "/hello"));
    q.timeout_ms = 100;
    assert_non_null(start(f, &late, &q));
    q = req_get(url(f, "/hello"));
    assert_non_null(start(f, &gone, &q));
    bm_upstream_cancel(gone.x); /* waiting: no callback, never sent */
    RUN_UNTIL(&f->loop, late.dones, 3000);
    assert_int_equal(late.err, BM_ETIMEDOUT);
    assert_true(late.elapsed_us >= 100 * 1000); /* never early */
    assert_int_equal(f->srv.nreqs, 1);          /* only /silent reached the node */
    assert_int_equal(bm_upstream_active(f->up), 1);
    bm_upstream_cancel(busy.x);
    RUN_FOR(&f->loop, 20);
    assert_int_equal(busy.dones + gone.dones + gone.heads, 0);
    assert_int_equal(bm_upstream_active(f->up), 0);
    rec_dispose(&busy);
    rec_dispose(&late);
    rec_dispose(&gone);
}

static void test_last_in_first_out(void **state)
{
    fx_t *f = *state;
    /* Three connections whose answers end in the order a, b, c: c's goes back last. */
    static const char *const paths[] = {"/stream?n=1&size=1&ms=20", "/stream?n=1&size=1&ms=60",
                                        "/stream?n=1&size=1&ms=100"};
    rec_t r[3];
    for (int i = 0; i < 3; i++) {
        rec_init(&r[i], f);
        bm_xfer_req_t q = req_get(url(f, paths[i]));
        assert_non_null(start(f, &r[i], &q));
    }
    RUN_UNTIL(&f->loop, r[0].dones && r[1].dones && r[2].dones, 3000);
    assert_int_equal(f->srv.accepts, 3);
    int last = f->srv.reqs[2].conn_id;
    for (int i = 0; i < 3; i++)
        rec_dispose(&r[i]);
    bm_xfer_req_t q = req_get(url(f, "/hello"));
    assert_int_equal(run_one(f, &q, NULL), 0);
    assert_int_equal(f->srv.reqs[3].conn_id, last);
}

static void cap_three(bm_upstream_opts_t *o)
{
    o->node_max_requests = 3;
}

static void test_requests_per_connection_cap(void **state)
{
    fx_t *f = *state;
    reopen(f, cap_three);
    for (int i = 0; i < 7; i++) {
        bm_xfer_req_t q = req_get(url(f, "/hello"));
        assert_int_equal(run_one(f, &q, NULL), 0);
    }
    assert_int_equal(f->srv.accepts, 3); /* 3 + 3 + 1 */
    assert_int_equal(f->srv.reqs[2].conn_id, f->srv.reqs[0].conn_id);
    assert_true(f->srv.reqs[3].conn_id != f->srv.reqs[2].conn_id);
    assert_int_equal(f->srv.reqs[5].conn_id, f->srv.reqs[3].conn_id);
    /* the replaced connections were closed by the client, not left open */
    RUN_UNTIL(&f->loop, f->srv.eofs == 2, 3000);
    assert_int_equal(f->srv.eofs, 2);
}

static void idle_close_fast(bm_upstream_opts_t *o)
{
    o->node_idle_close_ms = 80;
}

static void test_idle_connection_closed(void **state)
{
    fx_t *f = *state;
    reopen(f, idle_close_fast);
    bm_xfer_req_t q = req_get(url(f, "/hello"));
    uint64_t t0 = bm_clock_mono_us();
    assert_int_equal(run_one(f, &q, NULL), 0);
    RUN_UNTIL(&f->loop, f->srv.eofs == 1, 3000);
    assert_int_equal(f->srv.eofs, 1);
    assert_true(bm_clock_mono_us() - t0 >= 70 * 1000);
    /* the next request opens a new one */
    assert_int_equal(run_one(f, &q, NULL), 0);
    assert_int_equal(f->srv.accepts, 2);
}

static void test_cancelled_while_connecting_joins_pool(void **state)
{
    fx_t *f = *state;
    rec_t r;
    rec_init(&r, f);
    bm_xfer_req_t q = req_get(url(f, "/hello"));
    assert_non_null(start(f, &r, &q));
    bm_upstream_cancel(r.x); /* the connection is on its way: it is kept */
    RUN_UNTIL(&f->loop, f->srv.accepts == 1, 3000);
    RUN_FOR(&f->loop, 20);
    assert_int_equal(f->srv.nreqs, 0);
    assert_int_equal(r.heads + r.dones, 0);
    assert_int_equal(run_one(f, &q, NULL), 0);
    assert_int_equal(f->srv.accepts, 1);
    assert_int_equal(f->srv.eofs, 0);
    rec_dispose(&r);
}

static void test_host_name(void **state)
{
    fx_t *f = *state;
    /* "localhost" is resolved; when it resolves to ::1 first, that address is refused
     * (the server listens on 127.0.0.1) and the next one is tried. */
    char u[96];
    snprintf(u, sizeof u, "http://localhost:%d/hello", f->srv.port);
    bm_xfer_req_t q = req_get(u);
    q.connect_timeout_ms = 3000;
    size_t n = 0;
    assert_int_equal(run_one(f, &q, &n), 0);
    assert_int_equal(n, 31);
    char host[64];
    snprintf(host, sizeof host, "localhost:%d", f->srv.port);
    assert_string_equal(bm_hdrs_get(&f->srv.reqs[0].h, "Host"), host);
    /* the addresses are kept: the second request reuses the connection */
    assert_int_equal(run_one(f, &q, &n), 0);
    assert_int_equal(f->srv.accepts, 1);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)
    const struct CMUnitTest tests[] = {
        T(test_pool_bound_and_turns),
        T(test_waiting_transfer_times_out_or_is_cancelled),
        T(test_last_in_first_out),
        T(test_requests_per_connection_cap),
        T(test_idle_connection_closed),
        T(test_cancelled_while_connecting_joins_pool),
        T(test_host_name),
    };
#undef T
    return cmocka_run_group_tests_name("native http:// client", tests, use_native, NULL);
}
