/* SPDX-License-Identifier: MIT */
/*
 * test_server_stall: the server's input deadlines after the process was not scheduled.
 *
 * libuv runs due timers before it polls for I/O. When the process stalls for longer than a
 * timeout while the client's bytes arrive, the deadline is found passed on wake although
 * the bytes wait in the socket: the client was in time and we were late. The server must
 * read them before it judges (server.c, deadline_needs_look).
 *
 * Each case is deterministic, with no race against the clock: the client's first bytes
 * (if any) are read by the server; then, in the check phase of that same loop iteration
 * (after its poll, before the next one's timers), the client sends the rest and the
 * process stalls past the deadline. The next iteration runs the expired timer before it
 * polls, exactly as after a stall of the scheduler. The stall is the situation under test,
 * not a wait for anything.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "http/server.h"
#include "loop_guard.h"

#define TIMEOUT_MS 300 /* every input timeout of the server under test */
#define STALL_MS 400   /* past any deadline set before the stall began */
#define BOUND_MS 10000

typedef struct fx {
    uv_loop_t loop;
    bm_server_t *srv;
    uv_check_t check;
    int fd; /* the client: a blocking socket */
    int handled;
    char body[16];              /* the last request's body */
    const char *late;           /* sent inside the stall */
    int (*ready)(struct fx *f); /* the server took the early part: stall now */
    bool stalled;
} fx_t;

static void handler(bm_req_t *req, void *ud)
{
    fx_t *f = ud;
    f->handled++;
    bm_buf_t *b = bm_req_body(req);
    snprintf(f->body, sizeof f->body, "%.*s", b ? (int)b->len : 0, b ? b->data : "");
    bm_buf_t *ok = bm_buf_from_str("ok");
    bm_resp_send(req, 200, "text/plain", ok, NULL);
    bm_buf_unref(ok);
}

/* ---- the server's side of the connection, seen through the loop ------------------------ */

static void find_conn(uv_handle_t *h, void *arg)
{
    struct sockaddr_storage ss;
    int len = sizeof ss;
    uv_os_fd_t fd;
    if (h->type == UV_TCP && !uv_is_closing(h) &&
        uv_tcp_getpeername((uv_tcp_t *)h, (struct sockaddr *)&ss, &len) == 0 &&
        uv_fileno(h, &fd) == 0)
        *(int *)arg = fd;
}

/* Bytes waiting unread in the server's socket of the one connection, or -1: none accepted. */
static int server_unread(fx_t *f)
{
    int fd = -1, n = -1;
    uv_walk(&f->loop, find_conn, &fd);
    if (fd < 0 || ioctl(fd, FIONREAD, &n) != 0)
        return -1;
    return n;
}

static int accepted(fx_t *f)
{
    return server_unread(f) >= 0;
}

static int all_read(fx_t *f)
{
    return server_unread(f) == 0;
}

static int first_answered(fx_t *f)
{
    return f->handled == 1 && all_read(f);
}

/* ---- the stall ----------------------------------------------------------------------- */

static void stall(void)
{
    uint64_t end = uv_hrtime() + (uint64_t)STALL_MS * 1000000u;
    struct timespec ms = {0, 1000000};
    while (uv_hrtime() < end)
        nanosleep(&ms, NULL);
}

static void on_check(uv_check_t *h)
{
    fx_t *f = h->data;
    if (f->stalled || !f->ready(f))
        return;
    f->stalled = true;
    uv_check_stop(h);
    size_t n = strlen(f->late);
    assert_int_equal(send(f->fd, f->late, n, MSG_NOSIGNAL), (ssize_t)n);
    /* The bytes reach the server's socket through the kernel's loopback queue, which a
     * loaded machine may work off late: the case needs them there before the stall. */
    uint64_t bound = uv_hrtime() + (uint64_t)BOUND_MS * 1000000u;
    struct timespec ms = {0, 1000000};
    while (server_unread(f) < (int)n && uv_hrtime() < bound)
        nanosleep(&ms, NULL);
    assert_int_equal(server_unread(f), (int)n);
    stall();
}

/* ---- the client ---------------------------------------------------------------------- */

static void client_send(fx_t *f, const char *s)
{
    size_t n = strlen(s);
    assert_int_equal(send(f->fd, s, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* Reads one answer ("ok" body) into out; returns its length, or what came before the end. */
static size_t client_answer(fx_t *f, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = '\0';
    while (len + 1 < cap && !strstr(out, "\r\n\r\nok")) {
        struct pollfd p = {f->fd, POLLIN, 0};
        if (poll(&p, 1, BOUND_MS) != 1)
            break;
        ssize_t r = recv(f->fd, out + len, cap - 1 - len, 0);
        if (r <= 0)
            break;
        len += (size_t)r;
        out[len] = '\0';
    }
    return len;
}

static void fx_start(fx_t *f)
{
    memset(f, 0, sizeof *f);
    assert_int_equal(uv_loop_init(&f->loop), 0);
    bm_server_opts_t o;
    bm_server_opts_default(&o);
    o.header_timeout_ms = o.body_timeout_ms = o.idle_timeout_ms = TIMEOUT_MS;
    f->srv = bm_server_new(&f->loop, &o, handler, f);
    assert_non_null(f->srv);
    assert_int_equal(bm_server_listen(f->srv, "127.0.0.1", 0), 0);
    uv_check_init(&f->loop, &f->check);
    f->check.data = f;

    f->fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(f->fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(bm_server_port(f->srv))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    /* the kernel completes the handshake from the listen backlog: no loop needed */
    assert_int_equal(connect(f->fd, (struct sockaddr *)&a, sizeof a), 0);
}

static void on_server_done(bm_server_t *srv, void *ud)
{
    (void)srv;
    *(bool *)ud = true;
}

static void fx_finish(fx_t *f)
{
    close(f->fd);
    bool done = false;
    bm_server_shutdown(f->srv, 100, on_server_done, &done);
    RUN_UNTIL(&f->loop, done, BOUND_MS);
    assert_true(done);
    bm_server_free(f->srv);
    uv_close((uv_handle_t *)&f->check, NULL);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&f->loop), 0);
}

/* Sends `early`, lets the server take it (until ready), stalls with `late` sent, and expects
 * the request answered: 200 "ok", handled with `body`. */
static void run_case(fx_t *f, const char *early, int (*ready)(fx_t *f), const char *late,
                     int handled, const char *body)
{
    if (early[0])
        client_send(f, early);
    f->ready = ready;
    f->late = late;
    uv_check_start(&f->check, on_check);
    /* UV_RUN_NOWAIT passes, as beaconmux's UV_RUN_DEFAULT loop runs: UV_RUN_ONCE (RUN_UNTIL)
     * runs due timers once more at the end of its pass, so the stall's expired timer and its
     * look 1 ms later could both run before any poll, which the real loop never does. */
    guard_t *g = guard_start(&f->loop, BOUND_MS);
    while (!(f->stalled && (f->handled == handled || server_unread(f) < 0)) && !g->expired)
        uv_run(&f->loop, UV_RUN_NOWAIT);
    guard_stop(g);
    assert_true(f->stalled);
    char ans[512];
    client_answer(f, ans, sizeof ans);
    /* Before the fix: no answer (a first or next request: the connection closed) or a 408
     * (a head or body judged late). */
    if (!strstr(ans, "HTTP/1.1 200 "))
        fail_msg("expected a 200, got: %s", ans);
    assert_int_equal(f->handled, handled);
    assert_string_equal(f->body, body);
}

/* A new connection's first request arrives while we stall: not a silent connection. */
static void first_request_waiting(void **state)
{
    (void)state;
    fx_t f;
    fx_start(&f);
    run_case(&f, "", accepted, "GET /a HTTP/1.1\r\nHost: t\r\n\r\n", 1, "");
    fx_finish(&f);
}

/* The end of a head arrives while we stall: the head was in time (no 408). */
static void rest_of_head_waiting(void **state)
{
    (void)state;
    fx_t f;
    fx_start(&f);
    run_case(&f, "GET /a HTTP/1.1\r\n", all_read, "Host: t\r\n\r\n", 1, "");
    fx_finish(&f);
}

/* The rest of a body arrives while we stall: the client did not pause (no 408). */
static void rest_of_body_waiting(void **state)
{
    (void)state;
    fx_t f;
    fx_start(&f);
    run_case(&f, "POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n\r\nab", all_read, "cd", 1,
             "abcd");
    fx_finish(&f);
}

/* The next request on a kept-alive connection arrives while we stall: it is served, the
 * connection is not closed as idle under it. */
static void next_request_waiting(void **state)
{
    (void)state;
    fx_t f;
    fx_start(&f);
    client_send(&f, "GET /a HTTP/1.1\r\nHost: t\r\n\r\n");
    RUN_UNTIL(&f.loop, f.handled == 1, BOUND_MS);
    assert_int_equal(f.handled, 1);
    char ans[512];
    client_answer(&f, ans, sizeof ans);
    assert_non_null(strstr(ans, "HTTP/1.1 200 "));
    run_case(&f, "", first_answered, "POST /b HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\nz", 2,
             "z");
    fx_finish(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(first_request_waiting),
        cmocka_unit_test(rest_of_head_waiting),
        cmocka_unit_test(rest_of_body_waiting),
        cmocka_unit_test(next_request_waiting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
