/* SPDX-License-Identifier: MIT */
/*
 * test_http1: the request parser. Every case records the parser's events as text
 * (head, body, completion, error) so that a case states the whole expected outcome, and
 * the split tests can compare the outcome of a whole input with that of every split.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/buf.h"
#include "http/http1.h"

/* ---- an event recorder ------------------------------------------------------------- */

typedef struct rec {
    bm_str_t log;
    bm_str_t body;
    int heads;
    int completes;
    bool continue_seen;
} rec_t;

static int rec_head(void *ud, const bm_http1_head_t *h)
{
    rec_t *r = ud;
    r->heads++;
    bm_str_printf(&r->log, "H %s %s %d.%d ka=%d cl=%lld ch=%d ex=%d hd=%d", h->method, h->target,
                  h->version_major, h->version_minor, h->keep_alive, (long long)h->content_length,
                  h->chunked, h->expect_continue, h->is_head);
    for (size_t i = 0; i < h->headers->n; i++)
        bm_str_printf(&r->log, " [%s=%s]", h->headers->items[i].name, h->headers->items[i].value);
    bm_str_puts(&r->log, "\n");
    if (h->expect_continue)
        r->continue_seen = true;
    return 0;
}

static int rec_body(void *ud, const char *p, size_t n)
{
    rec_t *r = ud;
    assert_true(n > 0);
    bm_str_append(&r->body, p, n);
    return 0;
}

static void rec_flush_body(rec_t *r)
{
    if (bm_str_len(&r->body)) {
        bm_str_printf(&r->log, "B %zu:", bm_str_len(&r->body));
        bm_str_append(&r->log, bm_str_data(&r->body), bm_str_len(&r->body));
        bm_str_puts(&r->log, "\n");
        bm_str_clear(&r->body);
    }
}

static void rec_complete(void *ud)
{
    rec_t *r = ud;
    r->completes++;
    rec_flush_body(r);
    bm_str_puts(&r->log, "C\n");
}

static const bm_http1_callbacks_t rec_cbs = {rec_head, rec_body, rec_complete};

/* Feeds one piece, moving to the next message after each DONE. False after an error. */
static bool feed_piece(bm_http1_t *p, rec_t *r, const char *data, size_t len)
{
    size_t off = 0;
    while (off < len) {
        size_t used = 0;
        bm_http1_result_t res = bm_http1_feed(p, data + off, len - off, &used);
        assert_true(used <= len - off);
        off += used;
        if (res == BM_HTTP1_ERROR) {
            rec_flush_body(r);
            bm_str_printf(&r->log, "E %d %s\n", bm_http1_error_status(p),
                          bm_http1_error_message(p));
            return false;
        }
        if (res == BM_HTTP1_DONE)
            bm_http1_next(p);
        else
            assert_int_equal(off, len);
    }
    return true;
}

/* How many heads the last parse_split read the short way (without http-parser). */
static uint64_t last_short_heads;

/* Parses `in` split at the given positions (sorted, may be empty) and returns the log. */
static char *parse_split(const char *in, size_t len, const bm_http1_limits_t *lim,
                         const size_t *cuts, size_t ncuts)
{
    rec_t r = {0};
    bm_http1_t *p = bm_http1_new(lim, &rec_cbs, &r);
    assert_non_null(p);
    size_t start = 0;
    bool ok = true;
    for (size_t i = 0; i <= ncuts && ok; i++) {
        size_t end = i < ncuts ? cuts[i] : len;
        ok = feed_piece(p, &r, in + start, end - start);
        start = end;
    }
    if (ok) {
        rec_flush_body(&r);
        bm_str_printf(&r.log, "phase %d\n", (int)bm_http1_phase(p));
    }
    last_short_heads = bm_http1_short_heads(p);
    bm_http1_free(p);
    bm_str_dispose(&r.body);
    char *out = strdup(bm_str_data(&r.log));
    bm_str_dispose(&r.log);
    return out;
}

static char *parse(const char *in, const bm_http1_limits_t *lim)
{
    return parse_split(in, strlen(in), lim, NULL, 0);
}

/* What parsing `input` in one piece logs must be `want`. */
static void parses_as(const char *input, const char *want)
{
    char *log = parse(input, NULL);
    assert_string_equal(log, want);
    free(log);
}

/* The error status of parsing `in` whole, or 0. */
static int status_of(const char *in, size_t len, const bm_http1_limits_t *lim)
{
    bm_http1_t *p = bm_http1_new(lim, NULL, NULL);
    size_t off = 0;
    int st = 0;
    while (off < len) {
        size_t used;
        bm_http1_result_t res = bm_http1_feed(p, in + off, len - off, &used);
        off += used;
        if (res == BM_HTTP1_ERROR) {
            st = bm_http1_error_status(p);
            break;
        }
        if (res == BM_HTTP1_DONE)
            bm_http1_next(p);
    }
    bm_http1_free(p);
    return st;
}

static int status_z(const char *in)
{
    return status_of(in, strlen(in), NULL);
}

/* Asserts that every single split, and byte-by-byte feeding, gives the whole-input log. */
static void assert_split_invariant(const char *in, size_t len, const bm_http1_limits_t *lim)
{
    char *whole = parse_split(in, len, lim, NULL, 0);
    for (size_t k = 0; k <= len; k++) {
        char *got = parse_split(in, len, lim, &k, 1);
        if (strcmp(got, whole) != 0)
            fail_msg("split at %zu differs:\n%s\nvs whole:\n%s", k, got, whole);
        free(got);
    }
    size_t *cuts = malloc(len * sizeof *cuts);
    for (size_t k = 0; k < len; k++)
        cuts[k] = k;
    char *bytes = parse_split(in, len, lim, cuts, len);
    assert_string_equal(bytes, whole);
    free(bytes);
    free(cuts);
    free(whole);
}

/* ---- well-formed requests ---------------------------------------------------------- */

static void simple_get(void **state)
{
    parses_as("GET /eth/v1/node/health?x=1 HTTP/1.1\r\nHost: localhost:5052\r\n"
              "Accept:  application/json \r\n\r\n",
              "H GET /eth/v1/node/health?x=1 1.1 ka=1 cl=0 ch=0 ex=0 hd=0 "
              "[Host=localhost:5052] [Accept=application/json]\n"
              "C\nphase 0\n");
}

static void leading_empty_lines_skipped(void **state)
{
    parses_as("\r\n\r\nHEAD / HTTP/1.0\r\n\r\n",
              "H HEAD / 1.0 ka=0 cl=0 ch=0 ex=0 hd=1\nC\nphase 0\n");
}

static void http10_keep_alive(void **state)
{
    parses_as("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
              "GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
              "H GET / 1.0 ka=1 cl=0 ch=0 ex=0 hd=0 [Connection=keep-alive]\nC\n"
              "H GET / 1.1 ka=0 cl=0 ch=0 ex=0 hd=0 [Host=a] [Connection=close]\n"
              "C\nphase 0\n");
}

static void post_content_length(void **state)
{
    parses_as("POST /eth/v1/beacon/pool/attestations HTTP/1.1\r\nHost: x\r\n"
              "Content-Type: application/json\r\nContent-Length: 11\r\n\r\n[{\"a\":\"1\"}]",
              "H POST /eth/v1/beacon/pool/attestations 1.1 ka=1 cl=11 ch=0 ex=0 "
              "hd=0 [Host=x] [Content-Type=application/json] [Content-Length=11]\n"
              "B 11:[{\"a\":\"1\"}]\nC\nphase 0\n");
}

static void chunked_with_extensions_and_trailers(void **state)
{
    parses_as("POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
              "5;name=value\r\nhello\r\n"
              "6;a;b=\"c\"\r\n world\r\n"
              "0\r\nTrailer-One: 1\r\nChecksum: abc\r\n\r\n",
              "H POST /x 1.1 ka=1 cl=-1 ch=1 ex=0 hd=0 [Host=x] "
              "[Transfer-Encoding=chunked]\nB 11:hello world\nC\nphase 0\n");
}

static void expect_continue_flag(void **state)
{
    parses_as("PUT /x HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\n"
              "Content-Length: 2\r\n\r\nok"
              "PUT /x HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nk",
              "H PUT /x 1.1 ka=1 cl=2 ch=0 ex=1 hd=0 [Host=x] "
              "[Expect=100-Continue] [Content-Length=2]\nB 2:ok\nC\n"
              "H PUT /x 1.0 ka=0 cl=1 ch=0 ex=0 hd=0 [Expect=100-continue] "
              "[Content-Length=1]\nB 1:k\nC\nphase 0\n");
}

static const char pipelined[] = "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
                                "POST /b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
                                "POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                                "3;e=1\r\nxyz\r\n0\r\nT: 1\r\n\r\n"
                                "DELETE /d HTTP/1.1\r\nHost: x\r\n\r\n";

static void pipelined_in_one_buffer(void **state)
{
    char *log = parse(pipelined, NULL);
    assert_string_equal(
        log, "H GET /a 1.1 ka=1 cl=0 ch=0 ex=0 hd=0 [Host=x]\nC\n"
             "H POST /b 1.1 ka=1 cl=3 ch=0 ex=0 hd=0 [Host=x] [Content-Length=3]\nB 3:abc\nC\n"
             "H POST /c 1.1 ka=1 cl=-1 ch=1 ex=0 hd=0 [Host=x] [Transfer-Encoding=chunked]\n"
             "B 3:xyz\nC\n"
             "H DELETE /d 1.1 ka=1 cl=0 ch=0 ex=0 hd=0 [Host=x]\nC\nphase 0\n");
    free(log);
}

static void pipelined_stops_after_each_message(void **state)
{
    rec_t r = {0};
    bm_http1_t *p = bm_http1_new(NULL, &rec_cbs, &r);
    size_t len = strlen(pipelined), off = 0, used;
    int done = 0;
    while (off < len) {
        assert_int_equal(bm_http1_feed(p, pipelined + off, len - off, &used), BM_HTTP1_DONE);
        off += used;
        done++;
        assert_int_equal(r.completes, done);
        assert_int_equal(bm_http1_phase(p), BM_HTTP1_COMPLETE);
        /* Without bm_http1_next nothing more is consumed. */
        size_t again;
        assert_int_equal(bm_http1_feed(p, pipelined + off, len - off, &again), BM_HTTP1_DONE);
        assert_int_equal(again, 0);
        assert_non_null(bm_http1_head(p));
        bm_http1_next(p);
        assert_null(bm_http1_head(p));
    }
    assert_int_equal(done, 4);
    bm_http1_free(p);
    bm_str_dispose(&r.log);
    bm_str_dispose(&r.body);
}

static void every_split_gives_the_same_result(void **state)
{
    assert_split_invariant(pipelined, strlen(pipelined), NULL);
    static const char bad[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\nPOST / HTTP/1.1\r\nHost: x\r\n"
                              "Transfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\nZZ\r\n\r\n";
    assert_split_invariant(bad, strlen(bad), NULL);
    bm_http1_limits_t lim = {.max_target_bytes = 8, .max_header_bytes = 40, .max_body_bytes = 5};
    static const char limited[] = "GET /1234567 HTTP/1.1\r\nHost: x\r\n\r\n"
                                  "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                                  "3\r\nabc\r\n3\r\ndef\r\n0\r\n\r\n";
    assert_split_invariant(limited, strlen(limited), &lim);
}

/* ---- strictness -------------------------------------------------------------------- */

/* A Host of unreserved and sub-delim bytes, ':', '[', ']' and '%' is accepted; with any other
 * visible byte it is a 400. */
static void host_bytes(void **state)
{
    (void)state;
    static const char ok[] = "-._~!$&'()*+,;=:[]%";
    char in[128];
    for (int c = 0x21; c < 0x7f; c++) {
        snprintf(in, sizeof in, "GET / HTTP/1.1\r\nHost: a%cb\r\n\r\n", c);
        bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        int want = alnum || strchr(ok, c) ? 0 : 400;
        if (status_of(in, strlen(in), NULL) != want)
            fail_msg("Host byte 0x%02x: want %d", c, want);
    }
}

static void strict_rejections(void **state)
{
    static const struct {
        const char *in;
        int status;
    } cases[] = {
        {"GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost\t: x\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n  folded\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: x\r\nX-A: 1\r\n\tfolded\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\n Host: x\r\n\r\n", 400},
        {"GET / HTTP/1.1\nHost: x\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: x\nX: y\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: x\r\n\n", 400},
        {"GET / HTTP/1.1\r\nHost: x\rX: y\r\n\r\n", 400},
        {"GET / HTTP/1.1\rHost: x\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: x\r\n\rX", 400},
        {"\n\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: x\r\nX: a\x01z\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: x\r\n: empty\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: x\r\nNoColon\r\n\r\n", 400},
        {"GET  / HTTP/1.1\r\nHost: x\r\n\r\n", 400},
        {"GET / HTTP/1.1 \r\nHost: x\r\n\r\n", 400},
        {"GET /\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400},
        {"GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
         "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
         400},
        {"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
         "Content-Length: 3\r\n\r\n0\r\n\r\n",
         400},
        {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400},
        {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3, 4\r\n\r\nabcd", 400},
        {"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\nabc", 400},
        {"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
         "Transfer-Encoding: chunked\r\n\r\n",
         400},
        {"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501},
        {"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
        {"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400},
        {"GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505},
        {"GET / HTTP/0.9\r\n\r\n", 505},
        {"get / HTTP/1.1\r\nHost: x\r\n\r\n", 501},
        {"BREW / HTTP/1.1\r\nHost: x\r\n\r\n", 501},
        {"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n", 501},
        {"PUT / HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\nContent-Length: 1\r\n\r\nx", 417},
        /* a GET or HEAD with a body: RFC 9110 gives it no meaning, and it is a smuggling aid */
        {"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", 400},
        {"HEAD / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx", 400},
        {"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n", 400},
        {"GET / HTTP/1.0\r\nContent-Length: 2\r\n\r\nhi", 400},
        /* only origin-form targets that name a path the proxy can forward as it is */
        {"GET http://x/y?z HTTP/1.1\r\nHost: x\r\n\r\n", 400},
        {"GET https://x/ HTTP/1.1\r\nHost: x\r\n\r\n", 400},
        {"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", 400},
        {"GET x/y HTTP/1.1\r\nHost: x\r\n\r\n", 400},
        {"GET /eth/../lighthouse/database/reconstruct HTTP/1.1\r\nHost: x\r\n\r\n", 400},
        {"GET /eth/%2e%2E/x HTTP/1.1\r\nHost: x\r\n\r\n", 400},
        {"GET /eth/v1/. HTTP/1.1\r\nHost: x\r\n\r\n", 400},
        {"GET /.%2E?a HTTP/1.1\r\nHost: x\r\n\r\n", 400},
        {"GET /a%zz HTTP/1.1\r\nHost: x\r\n\r\n", 400},
        {"GET /a\\b HTTP/1.1\r\nHost: x\r\n\r\n", 400},
        {"GET /a#frag HTTP/1.1\r\nHost: x\r\n\r\n", 400},
        {"GET /x?a=\xc3\xa9 HTTP/1.1\r\nHost: x\r\n\r\n", 400},
        {"GET /caf\xc3\xa9 HTTP/1.1\r\nHost: x\r\n\r\n", 400},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int st = status_z(cases[i].in);
        if (st != cases[i].status)
            fail_msg("case %zu: got %d, want %d for %s", i, st, cases[i].status, cases[i].in);
        /* The verdict must not depend on where the input was split. */
        assert_split_invariant(cases[i].in, strlen(cases[i].in), NULL);
    }
}

static void strict_accepts(void **state)
{
    static const char *const ok[] = {
        "GET / HTTP/1.0\r\n\r\n",
        "GET / HTTP/1.1\r\nHost:\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n",
        "GET /x?a=%20&b=%C3%A9 HTTP/1.1\r\nHost: x\r\nX: a\tb \xff\r\n\r\n",
        "OPTIONS /eth/v1/node/version HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET /a..b/.c/...?x=/../&y=%2e%2e HTTP/1.1\r\nHost: x\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
        "DELETE /x HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi",
        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
        "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: CHUNKED\r\n\r\n0\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        int st = status_z(ok[i]);
        if (st != 0)
            fail_msg("case %zu refused with %d: %s", i, st, ok[i]);
    }
}

/*
 * The short way (a GET or HEAD in HTTP/1.1 read whole, framed without http-parser) takes
 * exactly the heads it may, and gives the events http-parser gives: the split invariant
 * compares each input fed whole with the same input fed byte by byte, which never takes it.
 */
static void short_way_agrees_with_http_parser(void **state)
{
    static const struct {
        const char *in;
        uint64_t shorts; /* heads read the short way when fed whole */
        const char *log; /* the events, when pinned */
    } cases[] = {
        {"GET /eth/v1/x?a=1&b=/?c HTTP/1.1\r\nHost: x\r\n\r\n", 1,
         "H GET /eth/v1/x?a=1&b=/?c 1.1 ka=1 cl=0 ch=0 ex=0 hd=0 [Host=x]\nC\nphase 0\n"},
        {"HEAD / HTTP/1.1\r\nHost: x\r\n\r\n", 1,
         "H HEAD / 1.1 ka=1 cl=0 ch=0 ex=0 hd=1 [Host=x]\nC\nphase 0\n"},
        {"\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", 1, NULL},
        {"GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n", 1, NULL},
        {"GET / HTTP/1.1\r\nHost: x\r\nCONNECTION: Keep-Alive\r\n\r\n", 1, NULL},
        {"GET / HTTP/1.1\r\nHost: x\r\nContent-Type: a\r\nTE-x: y\r\nUp: z\r\n\r\n", 1, NULL},
        {"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\n", 2, NULL},
        /* refused on the short way: the same verdicts as through http-parser */
        {"GET / HTTP/1.1\r\n\r\n", 1, "E 400 missing Host header\n"},
        {"GET /a#frag HTTP/1.1\r\nHost: x\r\n\r\n", 1, NULL},
        {"GET /a/../b HTTP/1.1\r\nHost: x\r\n\r\n", 1, NULL},
        {"GET / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n", 1, NULL},
        {"GET / HTTP/1.1\r\nHost: x\r\nExpect: later\r\n\r\n", 1, NULL},
        /* left to http-parser */
        {"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
         "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
         0, NULL},
        {"GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, close\r\n\r\n", 0, NULL},
        {"GET / HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: h2c\r\n\r\n", 0, NULL},
        {"GET / HTTP/1.1\r\nHost: x\r\nProxy-Connection: close\r\n\r\n", 0, NULL},
        {"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encodingx: y\r\n\r\n", 0, NULL},
        {"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 0, NULL},
        {"GET / HTTP/1.1\r\nHost: x\r\nContent-Lengthy: 5\r\n\r\n", 0, NULL},
        {"GET / HTTP/1.0\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n", 0, NULL},
        {"GET / HTTP/1.2\r\nHost: x\r\n\r\n", 0, NULL},
        {"GET / HTTP/2.1\r\nHost: x\r\n\r\n", 0, NULL},
        {"POST / HTTP/1.1\r\nHost: x\r\n\r\n", 0, NULL},
        {"GETS / HTTP/1.1\r\nHost: x\r\n\r\n", 0, NULL},
        {"Get / HTTP/1.1\r\nHost: x\r\n\r\n", 0, NULL},
        {"GET * HTTP/1.1\r\nHost: x\r\n\r\n", 0, NULL},
        {"GET x HTTP/1.1\r\nHost: x\r\n\r\n", 0, NULL},
        /* a head cut by the end of the input: the part read goes to http-parser */
        {"GET / HTTP/1.1\r\nHost: x\r\n", 0, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *log = parse(cases[i].in, NULL);
        if (last_short_heads != cases[i].shorts)
            fail_msg("case %zu: %llu heads the short way, want %llu: %s", i,
                     (unsigned long long)last_short_heads, (unsigned long long)cases[i].shorts,
                     cases[i].in);
        if (cases[i].log && strcmp(log, cases[i].log) != 0)
            fail_msg("case %zu: got\n%s\nwant\n%s", i, log, cases[i].log);
        free(log);
        assert_split_invariant(cases[i].in, strlen(cases[i].in), NULL);
    }
}

static void upgrade_request_parsed_as_plain(void **state)
{
    parses_as("GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              "\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\n",
              "H GET / 1.1 ka=1 cl=0 ch=0 ex=0 hd=0 [Host=x] [Upgrade=websocket] "
              "[Connection=Upgrade]\nC\n"
              "H GET /2 1.1 ka=1 cl=0 ch=0 ex=0 hd=0 [Host=x]\nC\nphase 0\n");
    /* With a body, http-parser takes another path out of an upgrade: same events. */
    const char *in = "POST / HTTP/1.1\r\nHost: x\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n"
                     "Content-Length: 2\r\n\r\nabGET /2 HTTP/1.1\r\nHost: x\r\n\r\n";
    parses_as(in, "H POST / 1.1 ka=1 cl=2 ch=0 ex=0 hd=0 [Host=x] [Upgrade=h2c] "
                  "[Connection=Upgrade] [Content-Length=2]\nB 2:ab\nC\n"
                  "H GET /2 1.1 ka=1 cl=0 ch=0 ex=0 hd=0 [Host=x]\nC\nphase 0\n");
    assert_split_invariant(in, strlen(in), NULL);
}

/* ---- limits ------------------------------------------------------------------------ */

static char *request_with_target(size_t target_len)
{
    char *s = malloc(target_len + 64);
    strcpy(s, "GET /");
    memset(s + 5, 'a', target_len - 1);
    strcpy(s + 4 + target_len, " HTTP/1.1\r\nHost: x\r\n\r\n");
    return s;
}

static void target_limit(void **state)
{
    char *ok = request_with_target(64 * 1024);
    assert_int_equal(status_z(ok), 0);
    char *big = request_with_target(64 * 1024 + 1);
    assert_int_equal(status_z(big), 414);
    /* Split right at the limit: the same answer. */
    size_t cut = 4 + 64 * 1024;
    char *log = parse_split(big, strlen(big), NULL, &cut, 1);
    assert_non_null(strstr(log, "E 414"));
    free(log);
    free(ok);
    free(big);
}

/* A request whose header section (field lines with CRLF) is exactly `n` bytes. */
static char *request_with_header_bytes(size_t n)
{
    const char *host = "Host: x\r\n"; /* 9 bytes */
    size_t filler = n - 9 - 5;        /* "X: " + value + CRLF */
    char *s = malloc(n + 64);
    size_t off = (size_t)sprintf(s, "GET / HTTP/1.1\r\n%sX: ", host);
    memset(s + off, 'v', filler);
    off += filler;
    strcpy(s + off, "\r\n\r\n");
    return s;
}

static void header_limit(void **state)
{
    char *a = request_with_header_bytes(16 * 1024 - 1);
    char *b = request_with_header_bytes(16 * 1024);
    char *c = request_with_header_bytes(16 * 1024 + 1);
    assert_int_equal(status_z(a), 0);
    assert_int_equal(status_z(b), 0);
    assert_int_equal(status_z(c), 431);
    /* Many small fields count the same way. */
    bm_str_t s = BM_STR_INIT;
    bm_str_puts(&s, "GET / HTTP/1.1\r\nHost: x\r\n");
    for (int i = 0; i < 2000; i++)
        bm_str_printf(&s, "X-%d: y\r\n", i);
    bm_str_puts(&s, "\r\n");
    assert_int_equal(status_of(bm_str_data(&s), bm_str_len(&s), NULL), 431);
    bm_str_dispose(&s);
    free(a);
    free(b);
    free(c);
}

static void body_limits(void **state)
{
    bm_http1_limits_t lim;
    bm_http1_limits_default(&lim);
    lim.max_body_bytes = 10;
    const char *big = "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\n";
    char *log = parse_split(big, strlen(big), &lim, NULL, 0);
    assert_string_equal(log, "E 413 request body too large\n");
    free(log);
    /* Content-Length at the limit is fine. */
    const char *at = "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n0123456789";
    assert_int_equal(status_of(at, strlen(at), &lim), 0);
    /* The default limit: 32 MiB + 1 is refused from the head alone. */
    assert_int_equal(status_z("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 33554433\r\n\r\n"),
                     413);
    /* Chunked: refused as soon as the running total passes the limit, not at the end. */
    const char *ch = "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                     "6\r\nabcdef\r\n6\r\nghijkl\r\n";
    log = parse_split(ch, strlen(ch), &lim, NULL, 0);
    assert_non_null(strstr(log, "B 10:abcdefghij\nE 413"));
    free(log);
    assert_split_invariant(ch, strlen(ch), &lim);
}

static void chunk_framing_bounded(void **state)
{
    bm_http1_limits_t lim;
    bm_http1_limits_default(&lim);
    lim.max_header_bytes = 64;
    bm_str_t s = BM_STR_INIT;
    bm_str_puts(&s, "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
    for (int i = 0; i < 100; i++)
        bm_str_putc(&s, '0'); /* leading zeros that http-parser would take forever */
    bm_str_puts(&s, "1\r\na\r\n0\r\n\r\n");
    assert_int_equal(status_of(bm_str_data(&s), bm_str_len(&s), &lim), 400);
    bm_str_clear(&s);
    bm_str_puts(&s, "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                    "1;ext=12345678901234567890\r\na\r\n0\r\nT: 1\r\n\r\n");
    assert_int_equal(status_of(bm_str_data(&s), bm_str_len(&s), &lim), 0);
    bm_str_dispose(&s);
}

static void null_callbacks_allowed(void **state)
{
    bm_http1_callbacks_t cbs = {0};
    cbs.on_head = NULL;
    bm_http1_t *p = bm_http1_new(NULL, &cbs, NULL);
    size_t used;
    assert_int_equal(bm_http1_feed(p, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27, &used),
                     BM_HTTP1_DONE);
    bm_http1_free(p);
}

static int refuse_head(void *ud, const bm_http1_head_t *h)
{
    return 503;
}

static void callback_refusal_is_the_status(void **state)
{
    bm_http1_callbacks_t cbs = {.on_head = refuse_head};
    bm_http1_t *p = bm_http1_new(NULL, &cbs, NULL);
    size_t used;
    assert_int_equal(bm_http1_feed(p, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27, &used),
                     BM_HTTP1_ERROR);
    assert_int_equal(bm_http1_error_status(p), 503);
    /* A failed parser takes nothing more. */
    assert_int_equal(bm_http1_feed(p, "GET", 3, &used), BM_HTTP1_ERROR);
    assert_int_equal(used, 0);
    bm_http1_free(p);
}

static void phases(void **state)
{
    bm_http1_t *p = bm_http1_new(NULL, NULL, NULL);
    size_t used;
    assert_int_equal(bm_http1_phase(p), BM_HTTP1_IDLE);
    assert_int_equal(bm_http1_feed(p, "POST / HTTP/1.1\r\n", 17, &used), BM_HTTP1_MORE);
    assert_int_equal(bm_http1_phase(p), BM_HTTP1_HEAD);
    const char *rest = "Host: x\r\nContent-Length: 2\r\n\r\na";
    assert_int_equal(bm_http1_feed(p, rest, strlen(rest), &used), BM_HTTP1_MORE);
    assert_int_equal(bm_http1_phase(p), BM_HTTP1_BODY);
    assert_int_equal(bm_http1_body_bytes(p), 1);
    assert_int_equal(bm_http1_feed(p, "bGET", 4, &used), BM_HTTP1_DONE);
    assert_int_equal(used, 1);
    assert_int_equal(bm_http1_phase(p), BM_HTTP1_COMPLETE);
    bm_http1_next(p);
    assert_int_equal(bm_http1_phase(p), BM_HTTP1_IDLE);
    bm_http1_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(simple_get),
        cmocka_unit_test(leading_empty_lines_skipped),
        cmocka_unit_test(http10_keep_alive),
        cmocka_unit_test(post_content_length),
        cmocka_unit_test(chunked_with_extensions_and_trailers),
        cmocka_unit_test(expect_continue_flag),
        cmocka_unit_test(pipelined_in_one_buffer),
        cmocka_unit_test(pipelined_stops_after_each_message),
        cmocka_unit_test(every_split_gives_the_same_result),
        cmocka_unit_test(strict_rejections),
        cmocka_unit_test(host_bytes),
        cmocka_unit_test(strict_accepts),
        cmocka_unit_test(short_way_agrees_with_http_parser),
        cmocka_unit_test(upgrade_request_parsed_as_plain),
        cmocka_unit_test(target_limit),
        cmocka_unit_test(header_limit),
        cmocka_unit_test(body_limits),
        cmocka_unit_test(chunk_framing_bounded),
        cmocka_unit_test(null_callbacks_allowed),
        cmocka_unit_test(callback_refusal_is_the_status),
        cmocka_unit_test(phases),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
