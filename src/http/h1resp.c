/* SPDX-License-Identifier: MIT */
/*
 * h1resp: http-parser in response mode, paused at every event. Each callback that makes
 * an event (final head, a run of body bytes, the end) records it and pauses the parser;
 * bm_h1resp_next then returns it with the number of bytes consumed, and the caller feeds
 * the rest later. Pausing keeps the caller's callbacks outside http_parser_execute and
 * keeps the byte accounting exact, which is what makes the limits independent of how the
 * input was split:
 *   - while a head is being read, at most the bytes left of max_head_bytes are given to
 *     http-parser, so a head that does not end within the limit fails at the
 *     same byte whatever the split;
 *   - in the body, the same allowance bounds the framing bytes between two runs of data.
 *
 * http-parser pauses mid-buffer correctly: when a body ends on a Content-Length, the
 * count it returns stops before the last body byte (already delivered); fed again, that
 * byte only completes the message. The caller never needs to know.
 *
 * The common answer takes a shorter way (see "the common head" below): a final head that
 * arrives whole in the first input, framed by Content-Length, in plain bytes, is read in
 * one pass and its body counted, without http-parser. That pass only accepts what
 * http-parser reads the same way; for anything else it steps aside before consuming a
 * byte, and http-parser reads the response from its start.
 */
#include "http/h1resp.h"

#include <http_parser.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/hdrs.h"
#include "base/log.h"
#include "http/uprules.h"

typedef enum {
    PH_HEAD,   /* reading a head (interim or final) */
    PH_BODY,   /* the final head was delivered; body, trailers, end */
    PH_DONE,   /* the response is complete */
    PH_FAILED, /* an error was reported */
} phase_t;

typedef enum {
    EV_NONE,
    EV_HEAD,
    EV_DATA,
    EV_INTERIM, /* an interim response ended: start over with the next head */
    EV_DONE,
} event_t;

typedef enum { FLD_NONE, FLD_NAME, FLD_VALUE } field_state_t;

/* The name or the value of the field being collected: a span of the running
 * http_parser_execute's input while it lies there (nearly always: no copy), else a copy,
 * made when the span goes on in a later input or is joined with another. */
typedef struct {
    const char *p; /* the span, while !copied */
    size_t n;
    bool copied; /* the text is in buf */
    bm_str_t buf;
} part_t;

struct bm_h1resp {
    http_parser hp;
    size_t max_head;
    phase_t phase;
    bool head_request;
    bm_hdrs_t *hdrs;
    int status;
    int64_t body_len;
    bool keep_alive;
    size_t head_bytes; /* bytes of the current head consumed */
    size_t framing;    /* body phase: bytes consumed since the last body data */

    field_state_t field;
    bool value_open; /* the last value span ended with the input: its line goes on */
    bool fold_ws;    /* after an obs-fold: leading whitespace is still being dropped */
    part_t name, value;

    event_t ev; /* set by a callback of the running http_parser_execute */
    const char *data;
    size_t len;
    const char *exec_end; /* end of the input of the running http_parser_execute */

    bool fresh;         /* nothing of this response was given to http-parser yet */
    bool quick;         /* the head was read by quick_head: the body is counted here */
    uint64_t remaining; /* quick: body bytes still to come */
    bool lag;           /* quick: the last byte of the previous event is not consumed yet */

    int err;
    const char *detail;
};

static http_parser_settings g_settings;
static bool g_settings_ready;

/* The one place the phase changes; transitions are logged in debug builds. */
static void set_phase(bm_h1resp_t *r, phase_t to)
{
#ifdef BM_DEBUG
    static const char *const names[] = {"head", "body", "done", "failed"};
    if (r->phase != to && bm_log_enabled(BM_LOG_DEBUG))
        bm_log(BM_LOG_DEBUG, "h1resp %p: %s -> %s", (void *)r, names[r->phase], names[to]);
#endif
    r->phase = to;
}

/* ---- callbacks ---------------------------------------------------------------------- */

static int fail_cb(bm_h1resp_t *r, int err, const char *detail)
{
    r->err = err;
    r->detail = detail;
    return -1; /* http-parser stops with HPE_CB_*; r->err says why */
}

static void trim(const char **p, size_t *n)
{
    while (*n && ((*p)[0] == ' ' || (*p)[0] == '\t')) {
        (*p)++;
        (*n)--;
    }
    while (*n && ((*p)[*n - 1] == ' ' || (*p)[*n - 1] == '\t'))
        (*n)--;
}

static void part_start(part_t *pt, const char *at, size_t len)
{
    pt->p = at;
    pt->n = len;
    pt->copied = false;
}

/* Moves the part's text out of the input into its own buffer. */
static void part_copy(part_t *pt)
{
    if (pt->copied)
        return;
    bm_str_clear(&pt->buf);
    bm_str_append(&pt->buf, pt->p, pt->n);
    pt->copied = true;
}

static void part_append(part_t *pt, const char *at, size_t len)
{
    part_copy(pt);
    bm_str_append(&pt->buf, at, len);
}

/* The part's text; false when a copy ran out of memory. */
static bool part_get(const part_t *pt, const char **p, size_t *n)
{
    if (!pt->copied) {
        *p = pt->p;
        *n = pt->n;
        return true;
    }
    *p = bm_str_data(&pt->buf);
    *n = bm_str_len(&pt->buf);
    return !pt->buf.oom;
}

/* Adds the field collected in name/value to the head. */
static int commit_field(bm_h1resp_t *r)
{
    r->field = FLD_NONE;
    const char *n, *v;
    size_t nl, vl;
    if (!part_get(&r->name, &n, &nl) || !part_get(&r->value, &v, &vl))
        return fail_cb(r, BM_ENOMEM, "out of memory for response headers");
    trim(&n, &nl);
    trim(&v, &vl);
    if (nl == 0)
        return 0; /* nothing usable; http-parser has judged the line already */
    if (bm_hdrs_add(r->hdrs, n, nl, v, vl) != 0)
        return fail_cb(r, BM_ENOMEM, "out of memory for response headers");
    return 0;
}

static int on_header_field(http_parser *hp, const char *at, size_t len)
{
    bm_h1resp_t *r = hp->data;
    if (r->phase != PH_HEAD)
        return 0; /* trailer fields: not part of the head */
    if (r->field == FLD_VALUE && commit_field(r) != 0)
        return -1;
    if (r->field == FLD_NAME) {
        part_append(&r->name, at, len); /* the name went on in this input */
    } else {
        part_start(&r->name, at, len);
        r->field = FLD_NAME;
    }
    return 0;
}

static int on_header_value(http_parser *hp, const char *at, size_t len)
{
    bm_h1resp_t *r = hp->data;
    if (r->phase != PH_HEAD)
        return 0;
    if (r->field == FLD_NAME) {
        /* http-parser 2.9 takes the first byte of a value without checking it (the rest it
         * refuses when it is a control): a NUL there would cut the value short. Refused
         * with http-parser's own words, so the outcome reads the same whichever of the two
         * sees the bad byte first. */
        if (len && !bm_uprules_value_byte_ok((unsigned char)at[0]))
            return fail_cb(r, BM_EPROTO, http_errno_description(HPE_INVALID_HEADER_TOKEN));
        part_start(&r->value, at, len);
        r->field = FLD_VALUE;
        r->fold_ws = false;
        r->value_open = at + len == r->exec_end;
        return 0;
    }
    if (!r->value_open) {
        /* The previous line ended and this span continues the value (obs-fold): the
         * fold and the continuation's leading whitespace become one space. */
        part_append(&r->value, " ", 1);
        r->fold_ws = true;
    }
    r->value_open = at + len == r->exec_end;
    while (r->fold_ws && len && (*at == ' ' || *at == '\t')) {
        at++; /* the continuation's leading whitespace, in whatever pieces it comes */
        len--;
    }
    if (len)
        r->fold_ws = false;
    part_append(&r->value, at, len);
    return 0;
}

/* The input of an http_parser_execute ended inside a field: keep what it holds of it. */
static void park_field(bm_h1resp_t *r)
{
    if (r->field == FLD_NONE)
        return;
    part_copy(&r->name);
    if (r->field == FLD_VALUE)
        part_copy(&r->value);
}

static int on_headers_complete(http_parser *hp)
{
    bm_h1resp_t *r = hp->data;
    if (r->field == FLD_VALUE && commit_field(r) != 0)
        return -1;
    r->field = FLD_NONE;
    int status = hp->status_code;
    if (status < 100)
        return fail_cb(r, BM_EPROTO, "invalid status code");
    if (status < 200) {
        if (!bm_uprules_interim_skipped(status))
            return fail_cb(r, BM_EPROTO,
                           status == 101 ? "unexpected 101 Switching Protocols"
                                         : "unexpected interim response");
        return 1; /* no body, whatever it says; on_message_complete starts over */
    }
    /* http-parser takes lengths up to 2^64 - 2; past 2^63 - 1 no body can match it (the
     * libcurl transport refuses the same, bm_uprules_content_length) */
    if ((hp->flags & F_CONTENTLENGTH) && hp->content_length > (uint64_t)INT64_MAX)
        return fail_cb(r, BM_EPROTO, "invalid Content-Length");
    r->status = status;
    /* Returning 1 tells http-parser that no body follows, whatever the head announces. */
    bool bodyless = r->head_request || status == 204 || status == 304;
    if (bodyless)
        r->body_len = 0;
    else if (hp->flags & F_CHUNKED)
        r->body_len = -1;
    else if (hp->flags & F_CONTENTLENGTH)
        r->body_len = (int64_t)hp->content_length;
    else
        r->body_len = -1;
    r->ev = EV_HEAD;
    http_parser_pause(hp, 1);
    return bodyless ? 1 : 0;
}

static int on_body(http_parser *hp, const char *at, size_t len)
{
    bm_h1resp_t *r = hp->data;
    if (len == 0)
        return 0;
    r->ev = EV_DATA;
    r->data = at;
    r->len = len;
    http_parser_pause(hp, 1);
    return 0;
}

static int on_message_complete(http_parser *hp)
{
    bm_h1resp_t *r = hp->data;
    if (r->phase == PH_HEAD) {
        r->ev = EV_INTERIM;
    } else {
        r->ev = EV_DONE;
        r->keep_alive = http_should_keep_alive(hp) != 0;
    }
    http_parser_pause(hp, 1);
    return 0;
}

/* ---- the common head ----------------------------------------------------------------- */
/*
 * Nearly every answer of a node is a final head that comes whole in one read, framed by
 * Content-Length (nginx, the clients' own servers): it is read here in one pass, several
 * times cheaper than http-parser's byte-wise state machine, which dominated the cost of a
 * proxied request. The pass accepts only this shape:
 *   HTTP/1.0 or HTTP/1.1, a status of 200 to 599, a reason of visible ASCII, spaces and
 *   tabs; fields of a token, ':' and a non-empty value of the same bytes, each line ended
 *   by CRLF; a Content-Length of 1 to 18 digits unless no body can follow (HEAD, 204,
 *   304); Connection only as exactly keep-alive or close;
 * and steps aside (before consuming anything, the fields it added cleared) on anything
 * else: interim heads, chunked or close-delimited bodies, Transfer-Encoding (or a name
 * that begins with it, which http-parser reads as one), Upgrade,
 * Proxy-Connection, a repeated Content-Length, obs-fold, bare LF, obs-text, a head cut by
 * the end of the input or longer than max_head. Those http-parser reads as before. Within
 * that shape both read the same status, fields, framing and keep-alive;
 * fuzz/fuzz_h1resp.c compares them on every input (its whole input takes this pass when
 * it can, its byte-by-byte feeding never does).
 */

/* Visible ASCII, space and tab: the bytes of a reason or a value this pass accepts. */
static inline bool plain(unsigned char c)
{
    return (c >= 0x20 && c < 0x7f) || c == '\t';
}

static inline bool is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

/* What quick_head found in the framing fields. */
typedef struct {
    bool has_length, close, keep_alive;
    uint64_t length;
} framing_t;

/* Judges one field for the framing; false when this pass must step aside. */
static bool quick_field(framing_t *f, const char *name, size_t nl, const char *v, size_t vl,
                        bool trailing_ows)
{
    switch (nl) {
    case 7:
        return !bm_ascii_case_eq(name, "upgrade", 7);
    case 10:
        if (!bm_ascii_case_eq(name, "connection", 10))
            return true;
        if (trailing_ows)
            return false;
        if (vl == 10 && bm_ascii_case_eq(v, "keep-alive", 10))
            f->keep_alive = true;
        else if (vl == 5 && bm_ascii_case_eq(v, "close", 5))
            f->close = true;
        else
            return false; /* a list, or upgrade: http-parser's token matching decides */
        return true;
    case 14:
        if (!bm_ascii_case_eq(name, "content-length", 14))
            return true;
        if (f->has_length || trailing_ows || vl > 18)
            return false;
        f->length = 0;
        for (size_t i = 0; i < vl; i++) {
            if (!is_digit((unsigned char)v[i]))
                return false;
            f->length = f->length * 10 + (uint64_t)(v[i] - '0');
        }
        f->has_length = true;
        return true;
    case 16:
        return !bm_ascii_case_eq(name, "proxy-connection", 16);
    default:
        /* http-parser takes any name that begins with transfer-encoding for one */
        return nl < 17 || !bm_ascii_case_eq(name, "transfer-encoding", 17);
    }
}

/* Reads a whole common head at p[0..n) into r (fields into r->hdrs): its length, or 0
 * when http-parser must read the response (r->hdrs then as it was: empty). */
static size_t quick_head(bm_h1resp_t *r, const char *p, size_t n)
{
    const unsigned char *s = (const unsigned char *)p;
    size_t lim = n < r->max_head ? n : r->max_head;
    if (lim < 16 || memcmp(s, "HTTP/1.", 7) != 0 || (s[7] != '0' && s[7] != '1') || s[8] != ' ' ||
        s[9] < '2' || s[9] > '5' || !is_digit(s[10]) || !is_digit(s[11]) || s[12] != ' ')
        return 0;
    int status = (s[9] - '0') * 100 + (s[10] - '0') * 10 + (s[11] - '0');
    size_t i = 13;
    while (i < lim && plain(s[i]))
        i++;
    framing_t f = {0};
    for (;;) {
        if (i + 1 >= lim || s[i] != '\r' || s[i + 1] != '\n')
            goto aside; /* the line did not end in CRLF within the input */
        i += 2;
        if (i + 1 < lim && s[i] == '\r' && s[i + 1] == '\n')
            break; /* the empty line */
        size_t name = i;
        while (i < lim && bm_tchar[s[i]])
            i++;
        if (i == name || i >= lim || s[i] != ':')
            goto aside;
        size_t nl = i - name;
        i++;
        while (i < lim && (s[i] == ' ' || s[i] == '\t'))
            i++;
        size_t v = i;
        while (i < lim && plain(s[i]))
            i++;
        size_t ve = i;
        while (ve > v && (s[ve - 1] == ' ' || s[ve - 1] == '\t'))
            ve--;
        if (ve == v || !quick_field(&f, p + name, nl, p + v, ve - v, ve != i))
            goto aside;
        if (bm_hdrs_add(r->hdrs, p + name, nl, p + v, ve - v) != 0)
            goto aside; /* out of memory: http-parser's way reports it */
    }
    bool bodyless = r->head_request || status == 204 || status == 304;
    if (!bodyless && !f.has_length)
        goto aside;
    r->status = status;
    r->body_len = bodyless ? 0 : (int64_t)f.length;
    r->remaining = bodyless ? 0 : f.length;
    /* http_should_keep_alive: HTTP/1.1 unless close, HTTP/1.0 only with keep-alive */
    r->keep_alive = s[7] == '1' ? !f.close : f.keep_alive;
    return i + 2;
aside:
    bm_hdrs_clear(r->hdrs);
    return 0;
}

/*
 * The body of a quickly read head: counted down to its end. As http-parser's way does, the
 * last byte of the head and the last byte of the body are left unconsumed by their events
 * and taken by the next call, which ends the response: the end then always comes from
 * bytes the caller still holds (a caller paused after the head or the last data feeds them
 * again on resume; a call without bytes would never come).
 */
static bm_h1resp_ev_t quick_body(bm_h1resp_t *r, const char *p, size_t n, size_t *used,
                                 const char **data, size_t *len)
{
    *used = 0;
    if (r->lag) {
        if (n == 0)
            return BM_H1RESP_MORE;
        r->lag = false;
        p++;
        n--;
        *used = 1;
    }
    if (r->remaining == 0) {
        set_phase(r, PH_DONE);
        return BM_H1RESP_DONE;
    }
    if (n == 0)
        return BM_H1RESP_MORE;
    size_t give = (uint64_t)n < r->remaining ? n : (size_t)r->remaining;
    r->remaining -= give;
    *data = p;
    *len = give;
    r->lag = r->remaining == 0;
    *used += r->lag ? give - 1 : give;
    return BM_H1RESP_DATA;
}

/* ---- the parser --------------------------------------------------------------------- */

bm_h1resp_t *bm_h1resp_new(size_t max_head_bytes)
{
    if (!g_settings_ready) {
        /* One loop per process uses this (single-threaded), like http1.c's settings. */
        http_parser_settings_init(&g_settings);
        g_settings.on_header_field = on_header_field;
        g_settings.on_header_value = on_header_value;
        g_settings.on_headers_complete = on_headers_complete;
        g_settings.on_body = on_body;
        g_settings.on_message_complete = on_message_complete;
        g_settings_ready = true;
    }
    bm_h1resp_t *r = calloc(1, sizeof *r);
    if (r)
        r->max_head = max_head_bytes;
    return r;
}

void bm_h1resp_free(bm_h1resp_t *r)
{
    if (!r)
        return;
    bm_str_dispose(&r->name.buf);
    bm_str_dispose(&r->value.buf);
    free(r);
}

void bm_h1resp_reset(bm_h1resp_t *r, bool head_request, bm_hdrs_t *hdrs)
{
    http_parser_init(&r->hp, HTTP_RESPONSE);
    r->hp.data = r;
    set_phase(r, PH_HEAD);
    r->head_request = head_request;
    r->hdrs = hdrs;
    bm_hdrs_clear(hdrs);
    r->status = 0;
    r->body_len = -1;
    r->keep_alive = false;
    r->head_bytes = 0;
    r->framing = 0;
    r->field = FLD_NONE;
    r->value_open = false;
    r->fresh = true;
    r->quick = false;
    r->remaining = 0;
    r->lag = false;
    r->err = 0;
    r->detail = NULL;
}

static bm_h1resp_ev_t fail(bm_h1resp_t *r, int err, const char *detail)
{
    set_phase(r, PH_FAILED);
    if (!r->err) {
        r->err = err;
        r->detail = detail;
    }
    return BM_H1RESP_ERROR;
}

/* Translates an http-parser error of the running phase. */
static bm_h1resp_ev_t fail_parser(bm_h1resp_t *r, enum http_errno e)
{
    if (e >= HPE_CB_message_begin && e <= HPE_CB_chunk_complete && r->err)
        return fail(r, r->err, r->detail);
    if (r->phase == PH_HEAD)
        return fail(r, BM_EPROTO, http_errno_description(e));
    return fail(r, BM_ECONNRESET, http_errno_description(e));
}

bm_h1resp_ev_t bm_h1resp_next(bm_h1resp_t *r, const char *p, size_t n, size_t *used,
                              const char **data, size_t *len)
{
    size_t off = 0;
    *data = NULL;
    *len = 0;
    for (;;) {
        *used = off;
        if (r->phase == PH_DONE)
            return BM_H1RESP_DONE;
        if (r->phase == PH_FAILED)
            return BM_H1RESP_ERROR;
        if (r->quick) {
            bm_h1resp_ev_t ev = quick_body(r, p + off, n - off, used, data, len);
            *used += off;
            return ev;
        }
        if (r->fresh && off < n) {
            r->fresh = false;
            size_t head = quick_head(r, p + off, n - off);
            if (head) {
                r->quick = true;
                r->lag = true; /* the head's final LF: see quick_body */
                set_phase(r, PH_BODY);
                *used = off + head - 1;
                return BM_H1RESP_HEAD;
            }
        }
        if (off == n)
            return BM_H1RESP_MORE;
        size_t spent = r->phase == PH_HEAD ? r->head_bytes : r->framing;
        size_t room = r->max_head - spent;
        if (room == 0)
            return r->phase == PH_HEAD ? fail(r, BM_EPROTO, "response head larger than 64 KiB")
                                       : fail(r, BM_ECONNRESET, "chunk framing too long");
        size_t give = n - off < room ? n - off : room;
        r->ev = EV_NONE;
        r->exec_end = p + off + give;
        size_t k = http_parser_execute(&r->hp, &g_settings, p + off, give);
        park_field(r);
        enum http_errno e = HTTP_PARSER_ERRNO(&r->hp);
        if (e == HPE_PAUSED)
            http_parser_pause(&r->hp, 0);
        else if (e != HPE_OK) {
            *used = off + k;
            return fail_parser(r, e);
        }
        off += k;
        *used = off;
        switch (r->ev) {
        case EV_HEAD:
            set_phase(r, PH_BODY);
            r->framing = 0;
            return BM_H1RESP_HEAD;
        case EV_DATA:
            /* Framing counts from the end of the data, by position: a chunk's CR taken
             * in the same call counts as it would when it came alone. */
            r->framing = p + off > r->data + r->len ? (size_t)(p + off - (r->data + r->len)) : 0;
            *data = r->data;
            *len = r->len;
            return BM_H1RESP_DATA;
        case EV_DONE:
            set_phase(r, PH_DONE);
            return BM_H1RESP_DONE;
        case EV_INTERIM:
            bm_hdrs_clear(r->hdrs);
            r->head_bytes = 0;
            continue;
        case EV_NONE:
            if (k < give) /* neither an event nor an error: never expected */
                return fail(r, BM_EPROTO, "response parser stalled");
            if (r->phase == PH_HEAD)
                r->head_bytes += k;
            else
                r->framing += k;
            continue;
        }
    }
}

bm_h1resp_ev_t bm_h1resp_eof(bm_h1resp_t *r)
{
    if (r->phase == PH_DONE)
        return BM_H1RESP_DONE;
    if (r->phase == PH_FAILED)
        return BM_H1RESP_ERROR;
    if (r->phase == PH_HEAD)
        return fail(r, BM_ECONNRESET,
                    r->head_bytes ? "connection closed inside the response head"
                                  : "connection closed before any response");
    if (r->quick) {
        if (r->remaining || r->lag)
            return fail(r, BM_ECONNRESET, "connection closed inside the response body");
        set_phase(r, PH_DONE);
        r->keep_alive = false; /* as http-parser's way: the close ended it */
        return BM_H1RESP_DONE;
    }
    r->ev = EV_NONE;
    http_parser_execute(&r->hp, &g_settings, NULL, 0);
    enum http_errno e = HTTP_PARSER_ERRNO(&r->hp);
    if (e == HPE_PAUSED)
        http_parser_pause(&r->hp, 0);
    if (r->ev == EV_DONE) {
        set_phase(r, PH_DONE);
        r->keep_alive = false;
        return BM_H1RESP_DONE;
    }
    return fail(r, BM_ECONNRESET, "connection closed inside the response body");
}

int bm_h1resp_status(const bm_h1resp_t *r)
{
    return r->phase == PH_HEAD ? 0 : r->status;
}

int64_t bm_h1resp_body_length(const bm_h1resp_t *r)
{
    return r->body_len;
}

bool bm_h1resp_keep_alive(const bm_h1resp_t *r)
{
    return r->phase == PH_DONE && r->keep_alive;
}

int bm_h1resp_error(const bm_h1resp_t *r, const char **detail)
{
    if (detail)
        *detail = r->detail;
    return r->phase == PH_FAILED ? r->err : 0;
}
