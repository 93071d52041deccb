/* SPDX-License-Identifier: MIT */
/*
 * Unit tests for sse: every WHATWG parsing rule the beacon streams rely on, the
 * split-anywhere property (every single split point, random multi-splits, byte by byte),
 * the Lighthouse `event:head` form against the standard one under CRLF fragmentation, and
 * the size bounds (an oversize event is dropped, the next one parsed).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "base/buf.h"
#include "base/err.h"
#include "http/sse.h"

/* ---- a recorder: everything the parser reports, as one comparable transcript ------ */

typedef struct {
    bm_str_t log; /* E/C/X records, length-prefixed so that nothing is ambiguous */
    size_t events;
    size_t errors;
    int last_err;
    int stop_after; /* return non-zero from the n-th event (0: never) */
    char topics[16][64];
    char datas[16][512];
    size_t data_lens[16];
    char ids[16][64];
} rec_t;

static void rec_init(rec_t *r)
{
    memset(r, 0, sizeof *r);
}

static void rec_dispose(rec_t *r)
{
    bm_str_dispose(&r->log);
}

static void put_field(bm_str_t *s, const char *p, size_t n)
{
    bm_str_printf(s, "%zu:", n);
    bm_str_append(s, p, n);
    bm_str_putc(s, '|');
}

static int on_event(void *ud, const bm_sse_event_t *ev)
{
    rec_t *r = ud;
    /* strings are NUL-terminated at their length */
    assert_int_equal(ev->topic[ev->topic_len], '\0');
    assert_int_equal(ev->data[ev->data_len], '\0');
    assert_int_equal(ev->id[ev->id_len], '\0');
    bm_str_puts(&r->log, "E|");
    put_field(&r->log, ev->topic, ev->topic_len);
    put_field(&r->log, ev->data, ev->data_len);
    put_field(&r->log, ev->id, ev->id_len);
    bm_str_putc(&r->log, '\n');
    if (r->events < 16) {
        snprintf(r->topics[r->events], 64, "%.*s", (int)ev->topic_len, ev->topic);
        size_t n = ev->data_len < 511 ? ev->data_len : 511;
        memcpy(r->datas[r->events], ev->data, n);
        r->datas[r->events][n] = '\0';
        r->data_lens[r->events] = ev->data_len;
        snprintf(r->ids[r->events], 64, "%.*s", (int)ev->id_len, ev->id);
    }
    r->events++;
    return r->stop_after && (int)r->events == r->stop_after;
}

static void on_comment(void *ud, const char *text, size_t len)
{
    rec_t *r = ud;
    bm_str_puts(&r->log, "C|");
    put_field(&r->log, text, len);
    bm_str_putc(&r->log, '\n');
}

static void on_error(void *ud, int err, const char *reason)
{
    rec_t *r = ud;
    assert_non_null(reason);
    r->errors++;
    r->last_err = err;
    bm_str_printf(&r->log, "X|%d\n", err);
}

static bm_sse_t *parser(rec_t *r, size_t max_data, size_t max_line)
{
    bm_sse_config_t cfg = {.max_data = max_data,
                           .max_line = max_line,
                           .on_event = on_event,
                           .on_comment = on_comment,
                           .on_error = on_error,
                           .ud = r};
    bm_sse_t *p = bm_sse_new(&cfg);
    assert_non_null(p);
    return p;
}

static void feed(bm_sse_t *p, const char *s, size_t n)
{
    assert_int_equal(bm_sse_feed(p, s, n), 0);
}

static void feed_z(bm_sse_t *p, const char *s)
{
    feed(p, s, strlen(s));
}

/* Parses `in` whole into r (fresh recorder and parser). */
static void parse_whole(rec_t *r, const char *in, size_t n, size_t max_data, size_t max_line)
{
    rec_init(r);
    bm_sse_t *p = parser(r, max_data, max_line);
    feed(p, in, n);
    bm_sse_free(p);
}

/* Parses `in` cut at the given ascending positions; returns the transcript. */
static char *parse_cut(const char *in, size_t n, const size_t *cuts, size_t ncuts, size_t max_data,
                       size_t max_line)
{
    rec_t r;
    rec_init(&r);
    bm_sse_t *p = parser(&r, max_data, max_line);
    size_t at = 0;
    for (size_t i = 0; i <= ncuts; i++) {
        size_t end = i < ncuts ? cuts[i] : n;
        feed(p, in + at, end - at);
        at = end;
    }
    bm_sse_free(p);
    char *t = strdup(bm_str_data(&r.log));
    rec_dispose(&r);
    return t;
}

/* ---- one test per rule ------------------------------------------------------------ */

static void test_basic_event(void **state)
{
    (void)state;
    rec_t r;
    const char *in = "event: head\ndata: {\"slot\":\"10\"}\n\n";
    parse_whole(&r, in, strlen(in), 0, 0);
    assert_int_equal(r.events, 1);
    assert_string_equal(r.topics[0], "head");
    assert_string_equal(r.datas[0], "{\"slot\":\"10\"}");
    assert_string_equal(r.ids[0], "");
    rec_dispose(&r);
}

static void test_default_topic_and_reset_of_type(void **state)
{
    (void)state;
    rec_t r;
    /* no event field: "message"; an empty event field: "message"; the type does not leak
     * into the next event */
    const char *in = "data: a\n\nevent\ndata: b\n\nevent: x\ndata: c\n\ndata: d\n\n";
    parse_whole(&r, in, strlen(in), 0, 0);
    assert_int_equal(r.events, 4);
    assert_string_equal(r.topics[0], "message");
    assert_string_equal(r.topics[1], "message");
    assert_string_equal(r.topics[2], "x");
    assert_string_equal(r.topics[3], "message");
    rec_dispose(&r);
}

static void test_multiline_data_and_space_rule(void **state)
{
    (void)state;
    rec_t r;
    /* data lines join with LF; exactly one leading space is stripped */
    const char *in = "data: a\ndata:b\ndata:  c\ndata:\ndata: \n\n";
    parse_whole(&r, in, strlen(in), 0, 0);
    assert_int_equal(r.events, 1);
    assert_string_equal(r.datas[0], "a\nb\n c\n\n");
    rec_dispose(&r);
    /* a value may contain colons */
    in = "data: {\"a\":\"b:c\"}\n\n";
    parse_whole(&r, in, strlen(in), 0, 0);
    assert_string_equal(r.datas[0], "{\"a\":\"b:c\"}");
    rec_dispose(&r);
}

static void test_line_endings(void **state)
{
    (void)state;
    const char *lf = "event: head\ndata: 1\ndata: 2\n\nevent: block\ndata: 3\n\n";
    const char *crlf = "event: head\r\ndata: 1\r\ndata: 2\r\n\r\nevent: block\r\ndata: 3\r\n\r\n";
    const char *cr = "event: head\rdata: 1\rdata: 2\r\revent: block\rdata: 3\r\r";
    const char *mixed = "event: head\rdata: 1\r\ndata: 2\n\r\nevent: block\ndata: 3\r\r\n";
    rec_t a, b;
    parse_whole(&a, lf, strlen(lf), 0, 0);
    assert_int_equal(a.events, 2);
    assert_string_equal(a.datas[0], "1\n2");
    const char *others[] = {crlf, cr, mixed};
    for (int i = 0; i < 3; i++) {
        parse_whole(&b, others[i], strlen(others[i]), 0, 0);
        assert_string_equal(bm_str_data(&a.log), bm_str_data(&b.log));
        rec_dispose(&b);
    }
    rec_dispose(&a);
}

static void test_crlf_split_is_one_line_end(void **state)
{
    (void)state;
    rec_t r;
    rec_init(&r);
    bm_sse_t *p = parser(&r, 0, 0);
    /* If the CR and the LF counted as two line ends, "a" would be dispatched alone. */
    feed_z(p, "data: a\r");
    feed_z(p, "\ndata: b\r");
    feed_z(p, "\n\r");
    assert_int_equal(r.events, 1); /* the blank line ended with the CR */
    feed_z(p, "\n");               /* this LF belongs to that CR: no second blank line */
    feed_z(p, "data: c\r\r");
    assert_int_equal(r.events, 2);
    assert_string_equal(r.datas[0], "a\nb");
    assert_string_equal(r.datas[1], "c");
    bm_sse_stats_t st = bm_sse_stats(p);
    assert_true(st.empty == 0);
    bm_sse_free(p);
    rec_dispose(&r);
}

/* One chunk whose lines end in LF, CR and CRLF in turn, some long and some empty: the
 * parser looks ahead for the next CR and the next LF separately and keeps both; a kept
 * position used after it was passed, or one not looked for again, would merge or lose a
 * line here. */
static void test_alternating_line_ends_in_one_chunk(void **state)
{
    (void)state;
    static const char *const ends[] = {"\n", "\r", "\r\n", "\r", "\n", "\n", "\r\n", "\r"};
    bm_str_t in = BM_STR_INIT;
    char want[16][512];
    for (int ev = 0; ev < 16; ev++) {
        size_t len = (size_t)(ev * 37 % 300);
        for (size_t k = 0; k < len; k++)
            want[ev][k] = (char)('a' + (ev + k) % 26);
        want[ev][len] = '\0';
        bm_str_puts(&in, "data:");
        bm_str_puts(&in, want[ev]);
        const char *end = ends[ev % 8], *blank = ends[(ev + 3) % 8];
        if (strcmp(end, "\r") == 0 && blank[0] == '\n')
            blank = "\r\n"; /* "\r" + "\n" would be one CRLF, not a blank line */
        bm_str_puts(&in, end);
        bm_str_puts(&in, blank);
    }
    rec_t r;
    parse_whole(&r, bm_str_data(&in), bm_str_len(&in), 0, 0);
    assert_int_equal(r.events, 16);
    for (int ev = 0; ev < 16; ev++)
        assert_string_equal(r.datas[ev], want[ev]);
    rec_dispose(&r);
    bm_str_dispose(&in);
}

static void test_comments(void **state)
{
    (void)state;
    rec_t r;
    rec_init(&r);
    bm_sse_t *p = parser(&r, 0, 16);
    /* comments are counted and reported, and do not disturb an event in progress */
    feed_z(p, ":keepalive\n: ping\ndata: a\n:\ndata: b\n\n: 0123456789abcdef\n");
    assert_int_equal(r.events, 1);
    assert_string_equal(r.datas[0], "a\nb");
    bm_sse_stats_t st = bm_sse_stats(p);
    assert_true(st.comments == 4);
    assert_int_equal(r.errors, 0); /* a long comment is truncated, never an error */
    assert_string_equal(bm_str_data(&r.log), "C|9:keepalive|\n"
                                             "C|5: ping|\n"
                                             "C|0:|\n"
                                             "E|7:message|3:a\nb|0:|\n"
                                             "C|16: 0123456789abcde|\n");
    bm_sse_free(p);
    rec_dispose(&r);
}

static void test_field_without_colon(void **state)
{
    (void)state;
    rec_t r;
    /* "data" alone is a data line with an empty value: per the spec it dispatches an event
     * with empty data; "foo" alone is an unknown field */
    const char *in = "data\n\nfoo\ndata: x\n\n";
    parse_whole(&r, in, strlen(in), 0, 0);
    assert_int_equal(r.events, 2);
    assert_int_equal(r.data_lens[0], 0);
    assert_string_equal(r.datas[1], "x");
    rec_dispose(&r);
}

static void test_unknown_fields_ignored(void **state)
{
    (void)state;
    rec_t r;
    const char *in = "foo: bar\nDATA: no\nEvent: no\ndata: x\n dat: y\n\n";
    parse_whole(&r, in, strlen(in), 0, 0);
    assert_int_equal(r.events, 1);
    assert_string_equal(r.topics[0], "message"); /* field names are case-sensitive */
    assert_string_equal(r.datas[0], "x");
    rec_dispose(&r);
}

static void test_empty_event_not_dispatched(void **state)
{
    (void)state;
    rec_t r;
    rec_init(&r);
    bm_sse_t *p = parser(&r, 0, 0);
    feed_z(p, "event: head\n\n\n\ndata: x\n\n");
    assert_int_equal(r.events, 1);
    assert_string_equal(r.topics[0], "message"); /* the type buffer was reset */
    bm_sse_stats_t st = bm_sse_stats(p);
    assert_true(st.empty == 3 && st.events == 1);
    bm_sse_free(p);
    rec_dispose(&r);
}

static void test_id(void **state)
{
    (void)state;
    rec_t r;
    rec_init(&r);
    bm_sse_t *p = parser(&r, 0, 0);
    feed_z(p, "id: 7\ndata: a\n\n");
    feed_z(p, "data: b\n\n"); /* the last id persists */
    feed_z(p, "id: 9\n\n");   /* no dispatch, but the id is taken */
    feed_z(p, "data: c\n\n");
    feed(p, "id: x\0y\ndata: d\n\n", 17); /* an id with NUL is ignored */
    feed_z(p, "id\ndata: e\n\n");         /* an empty id resets it */
    assert_int_equal(r.events, 5);
    assert_string_equal(r.ids[0], "7");
    assert_string_equal(r.ids[1], "7");
    assert_string_equal(r.ids[2], "9");
    assert_string_equal(r.ids[3], "9");
    assert_string_equal(r.ids[4], "");
    bm_sse_free(p);
    rec_dispose(&r);
}

static void test_retry(void **state)
{
    (void)state;
    rec_t r;
    rec_init(&r);
    bm_sse_t *p = parser(&r, 0, 0);
    assert_true(bm_sse_retry_ms(p) == -1);
    feed_z(p, "retry: 1500\n");
    assert_true(bm_sse_retry_ms(p) == 1500);
    const char *ignored[] = {"retry: 15x\n", "retry: \n",   "retry\n",
                             "retry: -5\n",  "retry:  7\n", "retry: 99999999999999999999999\n"};
    for (size_t i = 0; i < sizeof ignored / sizeof *ignored; i++) {
        feed_z(p, ignored[i]);
        assert_true(bm_sse_retry_ms(p) == 1500);
    }
    feed_z(p, "retry:0\n");
    assert_true(bm_sse_retry_ms(p) == 0);
    assert_int_equal(r.events, 0);
    bm_sse_free(p);
    rec_dispose(&r);
}

static void test_bom(void **state)
{
    (void)state;
    rec_t r;
    const char *in = "\xEF\xBB\xBF"
                     "data: x\n\n";
    parse_whole(&r, in, strlen(in), 0, 0);
    assert_int_equal(r.events, 1);
    assert_string_equal(r.datas[0], "x");
    rec_dispose(&r);

    /* split inside the BOM */
    rec_init(&r);
    bm_sse_t *p = parser(&r, 0, 0);
    feed_z(p, "\xEF");
    feed_z(p, "\xBB");
    feed_z(p, "\xBF"
              "data: y\n\n");
    assert_int_equal(r.events, 1);
    assert_string_equal(r.datas[0], "y");
    bm_sse_free(p);
    rec_dispose(&r);

    /* only one BOM, only at the start: a second one is part of the field name */
    in = "\xEF\xBB\xBF\xEF\xBB\xBF"
         "data: z\n\ndata: \xEF\xBB\xBF\n\n";
    parse_whole(&r, in, strlen(in), 0, 0);
    assert_int_equal(r.events, 1);
    assert_string_equal(r.datas[0], "\xEF\xBB\xBF");
    rec_dispose(&r);

    /* a partial BOM is ordinary input: "\xEF\xBB" then "data" is a field name */
    rec_init(&r);
    p = parser(&r, 0, 0);
    feed_z(p, "\xEF\xBB");
    feed_z(p, "data: q\n\ndata: w\n\n");
    assert_int_equal(r.events, 1);
    assert_string_equal(r.datas[0], "w");
    bm_sse_free(p);
    rec_dispose(&r);
}

static void test_nul_in_data(void **state)
{
    (void)state;
    rec_t r;
    parse_whole(&r, "data: a\0b\n\n", 11, 0, 0);
    assert_int_equal(r.events, 1);
    assert_int_equal(r.data_lens[0], 3);
    assert_memory_equal(r.datas[0], "a\0b", 3);
    rec_dispose(&r);
}

/* ---- beacon streams --------------------------------------------------------------- */

#define HEAD_JSON                                                                                  \
    "{\"slot\":\"10\", \"block\":\"0x9a2fefd2fdb57f74993c7780ea5b9030d2897b615b89f808011ca5aeb"    \
    "ed54eaf\", \"state\":\"0x600e852a08c1200654ddf11025f1ceacb3c2e74bdd5c630cde0838b2591b69f9"    \
    "\", \"epoch_transition\":false, \"previous_duty_dependent_root\":\"0x5e0043f107cb57913498f"   \
    "bf2f99ff55e730bf1e151f02f221e977c91a90a0e91\", \"current_duty_dependent_root\":\"0x5e0043f"   \
    "107cb57913498fbf2f99ff55e730bf1e151f02f221e977c91a90a0e91\", \"execution_optimistic\": "      \
    "false}"
#define BLOCK_JSON                                                                                 \
    "{\"slot\":\"10\", \"block\":\"0x9a2fefd2fdb57f74993c7780ea5b9030d2897b615b89f808011ca5aeb"    \
    "ed54eaf\", \"execution_optimistic\": false}"
#define FINALIZED_JSON                                                                             \
    "{\"block\":\"0x9a2fefd2fdb57f74993c7780ea5b9030d2897b615b89f808011ca5aebed54eaf\", \"stat"    \
    "e\":\"0x600e852a08c1200654ddf11025f1ceacb3c2e74bdd5c630cde0838b2591b69f9\", \"epoch\":\"2\"," \
    " \"execution_optimistic\": false }"

static void test_lighthouse_style_equals_standard(void **state)
{
    (void)state;
    const char *standard = "event: head\ndata: " HEAD_JSON "\n\n"
                           ": keepalive\n"
                           "event: block\ndata: " BLOCK_JSON "\n\n"
                           "event: finalized_checkpoint\ndata: " FINALIZED_JSON "\n\n";
    const char *lighthouse = "event:head\ndata:" HEAD_JSON "\n\n"
                             ": keepalive\n"
                             "event:block\ndata:" BLOCK_JSON "\n\n"
                             "event:finalized_checkpoint\ndata:" FINALIZED_JSON "\n\n";
    const char *crlf = "event:head\r\ndata: " HEAD_JSON "\r\n\r\n"
                       ": keepalive\r\n"
                       "event: block\r\ndata:" BLOCK_JSON "\r\n\r\n"
                       "event:finalized_checkpoint\r\ndata: " FINALIZED_JSON "\r\n\r\n";
    rec_t a;
    parse_whole(&a, standard, strlen(standard), 0, 0);
    assert_int_equal(a.events, 3);
    assert_string_equal(a.topics[0], "head");
    assert_string_equal(a.datas[0], HEAD_JSON);
    assert_string_equal(a.topics[1], "block");
    assert_string_equal(a.datas[1], BLOCK_JSON);
    assert_string_equal(a.topics[2], "finalized_checkpoint");
    assert_string_equal(a.datas[2], FINALIZED_JSON);
    const char *want = bm_str_data(&a.log);

    rec_t b;
    parse_whole(&b, lighthouse, strlen(lighthouse), 0, 0);
    assert_string_equal(bm_str_data(&b.log), want);
    rec_dispose(&b);

    /* CRLF, fragmented at every position, and into small random pieces */
    size_t n = strlen(crlf);
    for (size_t k = 0; k <= n; k++) {
        char *t = parse_cut(crlf, n, &k, 1, 0, 0);
        assert_string_equal(t, want);
        free(t);
    }
    srand(7);
    for (int iter = 0; iter < 200; iter++) {
        size_t cuts[64], nc = 0, at = 0;
        while (nc < 64) {
            at += 1 + (size_t)rand() % 16;
            if (at >= n)
                break;
            cuts[nc++] = at;
        }
        char *t = parse_cut(crlf, n, cuts, nc, 0, 0);
        assert_string_equal(t, want);
        free(t);
    }
    rec_dispose(&a);
}

/* An input that uses every rule, including an oversize event for the small limits. */
static const char MULTI[] =
    "\xEF\xBB\xBF"
    ": welcome\r\n"
    "retry: 2500\n"
    "event: head\r\n"
    "data: {\"slot\":\"1\"}\r\n"
    "\r\n"
    "id: 42\r"
    "event:block\r"
    "data:{\"slot\":\"2\",\r"
    "data: \"x\":\"a:b\"}\r"
    "\r"
    ":\n"
    "event: chain_reorg\n"
    "foo: bar\n"
    "data\n"
    "data:  two spaces\n"
    "\n"
    "event: orphan\n"
    "\n"
    "data: 0123456789012345678901234567890123456789012345678901234567890123456789\n"
    "data: still the oversize event\n"
    "\n"
    "event: an_event_name_longer_than_the_small_line_limit_of_forty_bytes\n"
    "data: dropped too\n"
    "\r\n"
    "id\n"
    "event: finalized_checkpoint\r\n"
    "data: {\"epoch\":\"2\"}\r\n"
    "\r\n";

static void check_all_splits(const char *in, size_t n, size_t max_data, size_t max_line)
{
    rec_t whole;
    parse_whole(&whole, in, n, max_data, max_line);
    const char *want = bm_str_data(&whole.log);
    for (size_t k = 0; k <= n; k++) {
        char *t = parse_cut(in, n, &k, 1, max_data, max_line);
        assert_string_equal(t, want);
        free(t);
    }
    /* random multi-splits, including many one-byte pieces */
    srand(12345);
    for (int iter = 0; iter < 500; iter++) {
        size_t cuts[512], nc = 0, at = 0;
        int maxpiece = 1 + rand() % 40;
        while (nc < 512) {
            at += 1 + (size_t)(rand() % maxpiece);
            if (at >= n)
                break;
            cuts[nc++] = at;
        }
        char *t = parse_cut(in, n, cuts, nc, max_data, max_line);
        assert_string_equal(t, want);
        free(t);
    }
    /* byte by byte */
    size_t *all = malloc(n * sizeof *all);
    for (size_t i = 0; i + 1 < n; i++)
        all[i] = i + 1;
    char *t = parse_cut(in, n, all, n ? n - 1 : 0, max_data, max_line);
    assert_string_equal(t, want);
    free(t);
    free(all);
    rec_dispose(&whole);
}

static void test_every_split_same_events(void **state)
{
    (void)state;
    size_t n = sizeof MULTI - 1;
    rec_t r;
    /* default limits: nothing is dropped */
    parse_whole(&r, MULTI, n, 0, 0);
    assert_int_equal(r.events, 6);
    assert_int_equal(r.errors, 0);
    assert_string_equal(r.topics[0], "head");
    assert_string_equal(r.datas[1], "{\"slot\":\"2\",\n\"x\":\"a:b\"}");
    assert_string_equal(r.ids[1], "42");
    assert_string_equal(r.topics[2], "chain_reorg");
    assert_string_equal(r.datas[2], "\n two spaces");
    assert_string_equal(r.ids[2], "42");
    assert_string_equal(r.topics[3], "message");
    assert_string_equal(r.topics[4],
                        "an_event_name_longer_than_the_small_line_limit_of_forty_bytes");
    assert_string_equal(r.topics[5], "finalized_checkpoint");
    assert_string_equal(r.ids[5], "");
    rec_dispose(&r);
    check_all_splits(MULTI, n, 0, 0);

    /* small limits: two events are dropped, the others come through unchanged */
    parse_whole(&r, MULTI, n, 64, 40);
    assert_int_equal(r.events, 4);
    assert_int_equal(r.errors, 2);
    assert_int_equal(r.last_err, BM_ETOOBIG);
    assert_string_equal(r.topics[2], "chain_reorg");
    assert_string_equal(r.topics[3], "finalized_checkpoint");
    rec_dispose(&r);
    check_all_splits(MULTI, n, 64, 40);
}

/* ---- bounds ----------------------------------------------------------------------- */

static void test_oversize_event_dropped_then_next_parsed(void **state)
{
    (void)state;
    rec_t r;
    rec_init(&r);
    bm_sse_t *p = parser(&r, 16, 32);
    /* exactly at the limit: 10 + LF + 5 = 16 bytes */
    feed_z(p, "data: 0123456789\ndata: 01234\n\n");
    assert_int_equal(r.events, 1);
    assert_int_equal(r.data_lens[0], 16);
    /* one byte over, in one line */
    feed_z(p, "event: head\ndata: 0123456789abcdefX\n\ndata: ok\n\n");
    assert_int_equal(r.events, 2);
    assert_int_equal(r.errors, 1);
    assert_int_equal(r.last_err, BM_ETOOBIG);
    assert_string_equal(r.datas[1], "ok");
    assert_string_equal(r.topics[1], "message"); /* the dropped event's type is gone */
    /* over through the joining LF of an empty data line */
    feed_z(p, "data: 0123456789abcdef\ndata:\n\ndata: ok2\n\n");
    assert_int_equal(r.errors, 2);
    assert_int_equal(r.events, 3);
    assert_string_equal(r.datas[2], "ok2");
    /* lines after the overflow belong to the dropped event until the blank line */
    feed_z(p, "data: 0123456789abcdefghij\ndata: x\nevent: y\nid: 5\n\ndata: after\n\n");
    assert_int_equal(r.errors, 3);
    assert_int_equal(r.events, 4);
    assert_string_equal(r.datas[3], "after");
    assert_string_equal(r.ids[3], "");
    /* a long event name, an unknown field name and an id over max_line */
    feed_z(p, "event: 0123456789012345678901234567890123456789\ndata: a\n\n");
    feed_z(p, "averyveryveryveryveryverylongfieldname\ndata: b\n\n");
    feed_z(p, "id: 01234567890123456789012345678901234567\ndata: c\n\n");
    feed_z(p, "data: fine\n\n");
    assert_int_equal(r.errors, 6);
    assert_int_equal(r.events, 5);
    assert_string_equal(r.datas[4], "fine");
    bm_sse_stats_t st = bm_sse_stats(p);
    assert_true(st.dropped == 6 && st.events == 5);
    bm_sse_free(p);
    rec_dispose(&r);
}

static void test_unbounded_line_is_bounded(void **state)
{
    (void)state;
    rec_t r;
    rec_init(&r);
    bm_sse_t *p = parser(&r, 1024, 64);
    /* 4 MiB of data without a line end: reported once, nothing kept */
    char chunk[4096];
    memset(chunk, 'z', sizeof chunk);
    feed_z(p, "data: ");
    for (int i = 0; i < 1024; i++)
        feed(p, chunk, sizeof chunk);
    feed_z(p, "\n\ndata: next\n\n");
    assert_int_equal(r.errors, 1);
    assert_int_equal(r.events, 1);
    assert_string_equal(r.datas[0], "next");
    /* the same with a field name that never ends */
    for (int i = 0; i < 1024; i++)
        feed(p, chunk, sizeof chunk);
    feed_z(p, "\n\ndata: again\n\n");
    assert_int_equal(r.errors, 2);
    assert_int_equal(r.events, 2);
    bm_sse_free(p);
    rec_dispose(&r);
}

static void test_default_limits(void **state)
{
    (void)state;
    rec_t r;
    rec_init(&r);
    bm_sse_t *p = parser(&r, 0, 0);
    size_t n = BM_SSE_DEFAULT_MAX_DATA;
    char *big = malloc(n + 1);
    memset(big, 'a', n + 1);
    feed_z(p, "data: ");
    feed(p, big, n); /* exactly 1 MiB: accepted */
    feed_z(p, "\n\n");
    assert_int_equal(r.events, 1);
    assert_int_equal(r.data_lens[0], n);
    feed_z(p, "data: ");
    feed(p, big, n + 1); /* one byte more: dropped */
    feed_z(p, "\n\n");
    assert_int_equal(r.events, 1);
    assert_int_equal(r.errors, 1);
    free(big);
    bm_sse_free(p);
    rec_dispose(&r);
}

/* ---- control ---------------------------------------------------------------------- */

static void test_stop_from_callback_and_reset(void **state)
{
    (void)state;
    rec_t r;
    rec_init(&r);
    r.stop_after = 1;
    bm_sse_t *p = parser(&r, 0, 0);
    const char *in = "id: 3\ndata: a\n\ndata: b\n\n";
    assert_int_equal(bm_sse_feed(p, in, strlen(in)), BM_ECANCELED);
    assert_int_equal(r.events, 1);
    assert_int_equal(bm_sse_feed(p, "data: c\n\n", 9), BM_ECANCELED);
    assert_int_equal(r.events, 1);
    bm_sse_reset(p);
    r.stop_after = 0;
    /* after a reset: a partial line and a pending CR from before are forgotten, the last
     * id and the retry value are kept */
    feed_z(p, "retry: 10\ndata: partial\r");
    bm_sse_reset(p);
    feed_z(p, "\ndata: d\n\n");
    assert_int_equal(r.events, 2);
    assert_string_equal(r.datas[1], "d");
    assert_string_equal(r.ids[1], "3");
    assert_true(bm_sse_retry_ms(p) == 10);
    /* a BOM is skipped again at the start of the new stream */
    bm_sse_reset(p);
    feed_z(p, "\xEF\xBB\xBF"
              "data: e\n\n");
    assert_string_equal(r.datas[2], "e");
    bm_sse_free(p);
    rec_dispose(&r);
}

static void test_no_callbacks(void **state)
{
    (void)state;
    bm_sse_t *p = bm_sse_new(NULL);
    assert_non_null(p);
    const char *in = ": c\ndata: a\n\ndata: 1\n\n";
    assert_int_equal(bm_sse_feed(p, in, strlen(in)), 0);
    assert_int_equal(bm_sse_feed(p, NULL, 0), 0);
    bm_sse_stats_t st = bm_sse_stats(p);
    assert_true(st.events == 2 && st.comments == 1 && st.bytes == strlen(in));
    bm_sse_free(p);
    bm_sse_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic_event),
        cmocka_unit_test(test_default_topic_and_reset_of_type),
        cmocka_unit_test(test_multiline_data_and_space_rule),
        cmocka_unit_test(test_line_endings),
        cmocka_unit_test(test_crlf_split_is_one_line_end),
        cmocka_unit_test(test_alternating_line_ends_in_one_chunk),
        cmocka_unit_test(test_comments),
        cmocka_unit_test(test_field_without_colon),
        cmocka_unit_test(test_unknown_fields_ignored),
        cmocka_unit_test(test_empty_event_not_dispatched),
        cmocka_unit_test(test_id),
        cmocka_unit_test(test_retry),
        cmocka_unit_test(test_bom),
        cmocka_unit_test(test_nul_in_data),
        cmocka_unit_test(test_lighthouse_style_equals_standard),
        cmocka_unit_test(test_every_split_same_events),
        cmocka_unit_test(test_oversize_event_dropped_then_next_parsed),
        cmocka_unit_test(test_unbounded_line_is_bounded),
        cmocka_unit_test(test_default_limits),
        cmocka_unit_test(test_stop_from_callback_and_reset),
        cmocka_unit_test(test_no_callbacks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
