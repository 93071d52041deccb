/* SPDX-License-Identifier: MIT */
/*
 * test_h1resp: the upstream response parser on its own. Each case is the bytes a node
 * sends and the events the parser must report, as one line of text; every case is fed
 * whole and byte by byte (fuzz/fuzz_h1resp.c checks any split on generated inputs).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/hdrs.h"
#include "http/h1resp.h"
#include "http/uprules.h"

/* The events for `in`, fed in pieces of `step` bytes (0: whole), then the close. */
static void run(const char *in, size_t n, bool head_req, size_t step, size_t max_head,
                bm_str_t *out)
{
    bm_h1resp_t *r = bm_h1resp_new(max_head);
    assert_non_null(r);
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_h1resp_reset(r, head_req, &h);
    size_t pos = 0, avail = step ? (step < n ? step : n) : n;
    for (;;) {
        size_t used, len;
        const char *d;
        bm_h1resp_ev_t ev = bm_h1resp_next(r, in + pos, avail - pos, &used, &d, &len);
        pos += used;
        if (ev == BM_H1RESP_MORE && avail < n) {
            avail = avail + step < n ? avail + step : n;
            continue;
        }
        if (ev == BM_H1RESP_MORE)
            ev = bm_h1resp_eof(r) == BM_H1RESP_DONE ? BM_H1RESP_DONE : BM_H1RESP_ERROR;
        if (ev == BM_H1RESP_HEAD) {
            bm_str_printf(out, "H%d/%lld", bm_h1resp_status(r),
                          (long long)bm_h1resp_body_length(r));
            for (size_t i = 0; i < h.n; i++)
                bm_str_printf(out, " %s=%s", h.items[i].name, h.items[i].value);
            bm_str_puts(out, ";");
        } else if (ev == BM_H1RESP_DATA) {
            bm_str_append(out, d, len);
        } else if (ev == BM_H1RESP_DONE) {
            bm_str_printf(out, ";done ka=%d rest=%zu", bm_h1resp_keep_alive(r), n - pos);
            break;
        } else if (ev == BM_H1RESP_ERROR) {
            const char *detail;
            int err = bm_h1resp_error(r, &detail);
            bm_str_printf(out, ";%s",
                          err == BM_EPROTO       ? "EPROTO"
                          : err == BM_ECONNRESET ? "ECONNRESET"
                                                 : "other");
            break;
        }
    }
    bm_hdrs_dispose(&h);
    bm_h1resp_free(r);
}

typedef struct {
    const char *in;
    bool head_req;
    const char *want;
} case_t;

#define CL2 "Content-Length: 2\r\n\r\nok"

static const case_t cases[] = {
    {"HTTP/1.1 200 OK\r\nX-A: b\r\nX-A:  c \r\n" CL2, false,
     "H200/2 X-A=b X-A=c Content-Length=2;ok;done ka=1 rest=0"},
    {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n"
     "X-Sum: 1\r\n\r\n",
     false, "H200/-1 Transfer-Encoding=chunked;abcde;done ka=1 rest=0"},
    /* HEAD, 204 and 304 have no body whatever Content-Length says */
    {"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", true,
     "H200/0 Content-Length=10;;done ka=1 rest=0"},
    {"HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\nxy", false,
     "H204/0 Content-Length=5;;done ka=1 rest=2"},
    {"HTTP/1.1 304 Not Modified\r\n\r\n", false, "H304/0;;done ka=1 rest=0"},
    /* interim heads: 100/102/103 skipped with their fields, the rest fail */
    {"HTTP/1.1 100 Continue\r\nX-I: 1\r\n\r\nHTTP/1.1 103 Early\r\nLink: x\r\n\r\n"
     "HTTP/1.1 200 OK\r\n" CL2,
     false, "H200/2 Content-Length=2;ok;done ka=1 rest=0"},
    {"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n", false, ";EPROTO"},
    {"HTTP/1.1 150 Odd\r\n\r\nHTTP/1.1 200 OK\r\n" CL2, false, ";EPROTO"},
    /* the close ends a body without length, and breaks any other */
    {"HTTP/1.1 200 OK\r\n\r\nuntil close", false, "H200/-1;until close;done ka=0 rest=0"},
    {"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort", false,
     "H200/9 Content-Length=9;short;ECONNRESET"},
    {"HTTP/1.1 200 OK\r\nContent-Le", false, ";ECONNRESET"},
    {"", false, ";ECONNRESET"},
    /* framing lies and bad heads */
    {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello world\r\n0\r\n\r\n", false,
     "H200/-1 Transfer-Encoding=chunked;hello;ECONNRESET"},
    {"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok", false, ";EPROTO"},
    {"HTTP/1.1 2x0 OK\r\n\r\n", false, ";EPROTO"},
    {"SSH-2.0-OpenSSH\r\n", false, ";EPROTO"},
    /* obs-fold joins with one space; HTTP/1.0 and Connection: close end the connection */
    {"HTTP/1.1 200 OK\r\nX-F: a\r\n  b\r\n" CL2, false,
     "H200/2 X-F=a b Content-Length=2;ok;done ka=1 rest=0"},
    {"HTTP/1.0 200 OK\r\n" CL2, false, "H200/2 Content-Length=2;ok;done ka=0 rest=0"},
    {"HTTP/1.1 200 OK\r\nConnection: close\r\n" CL2 "NEXT", false,
     "H200/2 Connection=close Content-Length=2;ok;done ka=0 rest=4"},
    /* shapes at the edge of the common head's pass (a whole head in one input): each reads
     * as http-parser reads it byte by byte; a name that begins with Transfer-Encoding is
     * one for http-parser (with a Content-Length: refused) */
    {"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\n" CL2 "NEXT", false,
     "H200/2 Connection=Keep-Alive Content-Length=2;ok;done ka=1 rest=4"},
    {"HTTP/1.1 200 OK\r\nConnection: keep-alive, close\r\n" CL2, false,
     "H200/2 Connection=keep-alive, close Content-Length=2;ok;done ka=0 rest=0"},
    {"HTTP/1.1 200 OK\r\nContent-Length: 2 \r\n\r\nok", false,
     "H200/2 Content-Length=2;ok;done ka=1 rest=0"},
    {"HTTP/1.1 200 OK\r\nTransfer-Encoding-X: chunked\r\n" CL2, false, ";EPROTO"},
    {"HTTP/1.1 200 OK\r\nUpgrade: h2c\r\n" CL2, false,
     "H200/2 Upgrade=h2c Content-Length=2;ok;done ka=1 rest=0"},
    {"HTTP/1.1 200 OK\r\nX-A: caf\xc3\xa9\r\n" CL2, false,
     "H200/2 X-A=caf\xc3\xa9 Content-Length=2;ok;done ka=1 rest=0"},
    {"HTTP/1.1 404 \r\nContent-Length: 0003\r\n\r\nabcdef", false,
     "H404/3 Content-Length=0003;abc;done ka=1 rest=3"},
    {"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\nHTTP/1.1", true,
     "H200/0 Content-Type=application/json;;done ka=1 rest=8"},
    {"HTTP/1.1 599 X\r\nContent-Length: 0\r\n\r\n", false,
     "H599/0 Content-Length=0;;done ka=1 rest=0"},
};

static void test_cases(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const case_t *c = &cases[i];
        for (size_t step = 0; step <= 1; step++) {
            bm_str_t out = BM_STR_INIT;
            run(c->in, strlen(c->in), c->head_req, step, BM_UPRULES_MAX_HEAD_BYTES, &out);
            if (strcmp(bm_str_data(&out), c->want) != 0)
                fail_msg("case %zu (step %zu): got\n  %s\nwant\n  %s", i, step, bm_str_data(&out),
                         c->want);
            bm_str_dispose(&out);
        }
    }
}

/* The end of a response always comes from bytes the caller still holds: the head's event and
 * the last data's leave their last byte unconsumed (a caller paused there feeds the rest again
 * on resume and gets the end; it would never call with no bytes). Whole and byte by byte. */
static void test_end_from_held_bytes(void **state)
{
    (void)state;
    static const char *const ins[] = {
        "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc",
        "HTTP/1.1 204 No Content\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof ins / sizeof ins[0]; i++) {
        size_t n = strlen(ins[i]);
        bm_h1resp_t *r = bm_h1resp_new(BM_UPRULES_MAX_HEAD_BYTES);
        bm_hdrs_t h;
        bm_hdrs_init(&h);
        bm_h1resp_reset(r, false, &h);
        size_t pos = 0;
        bm_h1resp_ev_t ev;
        do {
            size_t used, len;
            const char *d;
            ev = bm_h1resp_next(r, ins[i] + pos, n - pos, &used, &d, &len);
            pos += used;
            if (ev == BM_H1RESP_HEAD || ev == BM_H1RESP_DATA)
                assert_true(pos < n); /* a byte is left for the end */
        } while (ev == BM_H1RESP_HEAD || ev == BM_H1RESP_DATA);
        assert_int_equal(ev, BM_H1RESP_DONE);
        assert_int_equal(pos, n);
        bm_hdrs_dispose(&h);
        bm_h1resp_free(r);
    }
}

/* A head ends within the limit, or fails at the limit, wherever the input is cut. */
static void test_head_limit_exact(void **state)
{
    (void)state;
    char in[300];
    /* status line 17 + "X: " + pad + CRLF + CRLF: exactly 128 bytes of head */
    size_t pad = 128 - 17 - 3 - 2 - 2;
    int n = snprintf(in, sizeof in, "HTTP/1.1 200 OK\r\nX: %.*s\r\n\r\n", (int)pad,
                     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
    assert_int_equal(n, 128);
    for (size_t step = 0; step <= 1; step++) {
        bm_str_t out = BM_STR_INIT;
        run(in, (size_t)n, false, step, 128, &out);
        assert_non_null(strstr(bm_str_data(&out), "H200/-1"));
        bm_str_clear(&out);
        run(in, (size_t)n, false, step, 127, &out);
        assert_string_equal(bm_str_data(&out), ";EPROTO");
        bm_str_dispose(&out);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_head_limit_exact),
        cmocka_unit_test(test_end_from_held_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
