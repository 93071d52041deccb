/* SPDX-License-Identifier: MIT */
/*
 * http1: two parsers in step. Our head scanner sees every byte of a request head first:
 * it checks the RFC 9112 grammar strictly, enforces the target and header limits, and
 * collects the target and the fields (so http-parser's field callbacks are not used).
 * Then http-parser gets the same bytes, up to the scanner's error position if there is
 * one, and supplies what it is good at: the method, version, keep-alive, Content-Length
 * and chunked framing, and chunked decoding of the body. Whichever of the two finds the
 * first bad byte reports it (the scanner on a tie), which keeps the outcome independent
 * of how the input was split.
 *
 * After the head, bytes go straight to http-parser. For chunked bodies the framing
 * between two runs of data (chunk-size lines with extensions, the trailer section) is
 * bounded by max_header_bytes: http-parser would otherwise accept endless extensions or
 * leading zeros without delivering a byte.
 */
#include "http/http1.h"

#include <http_parser.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/hdrs.h"
#include "base/log.h"
#include "base/url.h"

enum scan_state {
    SC_START,       /* before the request line; empty lines (CRLF) are skipped */
    SC_START_LF,    /* CR of an empty line seen */
    SC_METHOD,      /* in the method token */
    SC_TARGET,      /* in the request target */
    SC_VERSION,     /* in "HTTP/x.y" */
    SC_RL_LF,       /* CR after the version seen */
    SC_FIELD_START, /* at the start of a field line or of the final empty line */
    SC_NAME,        /* in a field name */
    SC_VALUE,       /* in a field value */
    SC_VALUE_LF,    /* CR after a field value seen */
    SC_END_LF,      /* CR of the final empty line seen */
    SC_DONE,        /* the head ended */
};

struct bm_http1 {
    http_parser hp;
    bm_http1_limits_t lim;
    bm_http1_callbacks_t cbs;
    void *ud;

    bm_http1_phase_t phase;
    enum scan_state sc;
    unsigned version_idx;   /* position inside "HTTP/x.y" */
    size_t header_bytes;    /* counted against max_header_bytes */
    size_t name_len;        /* length of the field name at the start of `line` */
    bm_str_t target;        /* the request target */
    bm_str_t line;          /* the field line being collected: name then value */
    bm_hdrs_t hdrs;         /* the fields of the current head */
    bm_http1_head_t head;   /* valid once head_ok */
    bool head_ok;           /* the head passed every check and on_head ran */
    bool complete;          /* http-parser reported the end of the message */
    uint64_t body_bytes;    /* delivered body bytes */
    uint64_t pos;           /* bytes of the current message consumed so far */
    uint64_t last_data_end; /* position after the last body byte (or the head) */
    const char *cur_base;   /* data pointer of the running http_parser_execute */
    uint64_t cur_pos;       /* message position of cur_base */
    const char *method_at;  /* the method's first byte, in the data of the feed that saw it */
    size_t method_len;      /* the method's length */
    char version[2];        /* the version's major and minor digit */
    bool hp_closed;         /* http-parser ended its last message for good (no keep-alive) */
    uint64_t short_heads;   /* heads read without http-parser (bm_http1_short_heads) */

    int err_status;
    const char *err_msg;
};

static http_parser_settings hp_settings;

void bm_http1_limits_default(bm_http1_limits_t *l)
{
    l->max_target_bytes = 64 * 1024;
    l->max_header_bytes = 16 * 1024;
    l->max_body_bytes = 32 * 1024 * 1024;
}

/* ---- character classes ------------------------------------------------------------- */

/* Request target bytes: visible ASCII and obs-text; no SP, no controls. */
static inline bool is_target_char(unsigned char c)
{
    return c > 0x20 && c != 0x7f;
}

/* field-value bytes (RFC 9110 5.5): VCHAR, SP, HTAB, obs-text. */
static inline bool is_value_char(unsigned char c)
{
    return c == '\t' || (c >= 0x20 && c != 0x7f);
}

static inline bool is_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* ---- errors ------------------------------------------------------------------------ */

/* The one place the phase changes; transitions are logged in debug builds. */
static void set_phase(bm_http1_t *p, bm_http1_phase_t to)
{
#ifdef BM_DEBUG
    static const char *const names[] = {"idle", "head", "body", "complete", "failed"};
    if (p->phase != to && bm_log_enabled(BM_LOG_DEBUG))
        bm_log(BM_LOG_DEBUG, "http1 %p: %s -> %s", (void *)p, names[p->phase], names[to]);
#endif
    p->phase = to;
}

static void fail(bm_http1_t *p, int status, const char *msg)
{
    if (p->phase == BM_HTTP1_FAILED)
        return;
    set_phase(p, BM_HTTP1_FAILED);
    p->err_status = status;
    p->err_msg = msg;
}

/* A callback's refusal: its return value is the status to answer. */
static void fail_cb(bm_http1_t *p, int rc)
{
    fail(p, rc >= 400 && rc <= 599 ? rc : 500, "request refused");
}

static void fail_parser(bm_http1_t *p, enum http_errno e)
{
    switch (e) {
    case HPE_INVALID_METHOD:
        fail(p, 501, "method not implemented");
        break;
    case HPE_HEADER_OVERFLOW:
        fail(p, 431, "request header section too large");
        break;
    case HPE_UNEXPECTED_CONTENT_LENGTH:
        fail(p, 400, "Content-Length repeated or sent with Transfer-Encoding");
        break;
    case HPE_INVALID_CONTENT_LENGTH:
        fail(p, 400, "invalid Content-Length");
        break;
    case HPE_INVALID_TRANSFER_ENCODING:
        fail(p, 400, "Transfer-Encoding must end with chunked");
        break;
    case HPE_INVALID_CHUNK_SIZE:
        fail(p, 400, "invalid chunk size");
        break;
    case HPE_INVALID_URL:
    case HPE_INVALID_HOST:
    case HPE_INVALID_PORT:
    case HPE_INVALID_PATH:
    case HPE_INVALID_QUERY_STRING:
    case HPE_INVALID_FRAGMENT:
        fail(p, 400, "invalid request target");
        break;
    default:
        fail(p, 400, http_errno_description(e));
        break;
    }
}

/* ---- the head scanner -------------------------------------------------------------- */

/* Counts k more header-section bytes; false (and 431) when that exceeds the limit. */
static bool count_header(bm_http1_t *p, size_t k)
{
    if (p->header_bytes + k > p->lim.max_header_bytes) {
        fail(p, 431, "request header section too large");
        return false;
    }
    p->header_bytes += k;
    return true;
}

/* Lengths of the runs of method/name, target and value bytes starting at s[i]. */
static size_t run_tchar(const unsigned char *s, size_t i, size_t len)
{
    size_t j = i;
    while (j < len && bm_tchar[s[j]])
        j++;
    return j - i;
}

static size_t run_target(const unsigned char *s, size_t i, size_t len)
{
    /* Eight bytes at a time while none is below 0x21 (the "has less than" word trick, exact
     * for a bound up to 0x80) and none is 0x7f (the "has zero" trick on x ^ 0x7f..): the
     * target is most of a request line, and byte by byte it was a third of the scan. The
     * word that holds the end goes byte by byte. */
    const uint64_t ones = 0x0101010101010101u, highs = 0x8080808080808080u;
    size_t j = i;
    for (; len - j >= 8; j += 8) {
        uint64_t x;
        memcpy(&x, s + j, 8);
        uint64_t del = x ^ (ones * 0x7f);
        if (((x - ones * 0x21) & ~x & highs) | ((del - ones) & ~del & highs))
            break;
    }
    while (j < len && is_target_char(s[j]))
        j++;
    return j - i;
}

static size_t run_value(const unsigned char *s, size_t i, size_t len)
{
    size_t j = i;
    while (j < len && is_value_char(s[j]))
        j++;
    return j - i;
}

/*
 * Appends the `run` bytes at s[*i] to the field line and moves *i past them, counting them
 * against the header limit. Over the limit: fails (431), moves *i exactly to the limit (so
 * the error position does not depend on how the input was split) and returns false.
 */
static inline bool take_field_bytes(bm_http1_t *p, const unsigned char *s, size_t *i, size_t run)
{
    if (!count_header(p, run)) {
        *i += p->lim.max_header_bytes - p->header_bytes;
        return false;
    }
    if (run)
        bm_str_append(&p->line, s + *i, run);
    *i += run;
    return true;
}

/* The field line in `line` is complete: trim the value and store the field. */
static bool commit_field(bm_http1_t *p)
{
    if (p->line.oom) {
        fail(p, 500, "out of memory");
        return false;
    }
    const char *s = bm_str_data(&p->line);
    size_t n = bm_str_len(&p->line);
    const char *v = s + p->name_len;
    const char *e = s + n;
    while (v < e && is_ows(*v))
        v++;
    while (e > v && is_ows(e[-1]))
        e--;
    if (bm_hdrs_add(&p->hdrs, s, p->name_len, v, (size_t)(e - v)) != 0) {
        fail(p, 500, "out of memory");
        return false;
    }
    bm_str_clear(&p->line);
    return true;
}

/*
 * A field line that lies whole in s[i..len), ends with CRLF, holds only bytes SC_NAME and
 * SC_VALUE accept and fits the header limit is stored straight from the input (without
 * collecting it in `line` first: one copy instead of two). Returns its length, or 0 when it
 * is anything else (cut by the end of the read, a bad byte, over the limit, out of memory):
 * then SC_NAME reads it byte by byte and reaches its verdict at the same byte as before.
 */
static size_t whole_field(bm_http1_t *p, const unsigned char *s, size_t i, size_t len)
{
    size_t colon = i + run_tchar(s, i, len);
    if (colon >= len || s[colon] != ':')
        return 0;
    size_t cr = colon + 1 + run_value(s, colon + 1, len);
    if (len - cr < 2 || s[cr] != '\r' || s[cr + 1] != '\n')
        return 0;
    size_t total = cr + 2 - i;
    if (p->header_bytes + total > p->lim.max_header_bytes)
        return 0;
    const char *v = (const char *)s + colon + 1, *e = (const char *)s + cr;
    while (v < e && is_ows(*v))
        v++;
    while (e > v && is_ows(e[-1]))
        e--;
    if (bm_hdrs_add(&p->hdrs, (const char *)s + i, colon - i, v, (size_t)(e - v)) != 0)
        return 0;
    p->header_bytes += total;
    return total;
}

static const char *bad_char_msg(unsigned char c, const char *otherwise)
{
    if (c == '\n')
        return "bare LF in request head";
    if (c == '\r')
        return "bare CR in request head";
    return otherwise;
}

/*
 * Scans s[0..len) of a request head. Stops after the final LF (sc == SC_DONE), at the end
 * of the input, or before the first bad byte (phase FAILED). Returns the number of bytes
 * accepted.
 */
static size_t scan_head(bm_http1_t *p, const unsigned char *s, size_t len)
{
    size_t i = 0;
    while (i < len && p->sc != SC_DONE) {
        unsigned char c = s[i];
        switch (p->sc) {
        case SC_START:
            if (c == '\r') {
                if (!count_header(p, 1))
                    return i;
                p->sc = SC_START_LF;
                i++;
            } else if (bm_tchar[c]) {
                p->sc = SC_METHOD;
                p->method_at = (const char *)s + i;
                p->method_len = 1;
                i++;
            } else {
                fail(p, 400, bad_char_msg(c, "invalid character in method"));
                return i;
            }
            break;

        case SC_START_LF:
            if (c != '\n') {
                fail(p, 400, "bare CR in request head");
                return i;
            }
            if (!count_header(p, 1))
                return i;
            p->sc = SC_START;
            i++;
            break;

        case SC_METHOD: {
            size_t run = run_tchar(s, i, len);
            p->method_len += run;
            i += run;
            if (i == len)
                break;
            if (s[i] != ' ') {
                fail(p, 400, bad_char_msg(s[i], "invalid character in method"));
                return i;
            }
            p->sc = SC_TARGET;
            i++;
            break;
        }

        case SC_TARGET: {
            size_t run = run_target(s, i, len);
            size_t have = bm_str_len(&p->target);
            if (have + run > p->lim.max_target_bytes) {
                i += p->lim.max_target_bytes - have;
                fail(p, 414, "request target too long");
                return i;
            }
            if (run)
                bm_str_append(&p->target, s + i, run);
            i += run;
            if (i == len)
                break;
            if (s[i] != ' ' || bm_str_len(&p->target) == 0) {
                fail(p, 400, bad_char_msg(s[i], "invalid request line"));
                return i;
            }
            p->sc = SC_VERSION;
            p->version_idx = 0;
            i++;
            break;
        }

        case SC_VERSION: {
            static const char tmpl[] = "HTTP/0.0";
            unsigned k = p->version_idx;
            bool ok;
            if (k == 8)
                ok = c == '\r';
            else if (tmpl[k] == '0')
                ok = c >= '0' && c <= '9';
            else
                ok = c == (unsigned char)tmpl[k];
            if (!ok) {
                fail(p, 400, bad_char_msg(c, "invalid HTTP version in request line"));
                return i;
            }
            if (k == 8)
                p->sc = SC_RL_LF;
            else if (k == 5 || k == 7)
                p->version[k == 7] = (char)c;
            p->version_idx = k + 1;
            i++;
            break;
        }

        case SC_RL_LF:
            if (c != '\n') {
                fail(p, 400, "bare CR in request head");
                return i;
            }
            p->sc = SC_FIELD_START;
            i++;
            break;

        case SC_FIELD_START:
            if (c == '\r') {
                p->sc = SC_END_LF;
                i++;
            } else if (bm_tchar[c]) {
                size_t took = whole_field(p, s, i, len);
                if (took)
                    i += took; /* and the next field line */
                else
                    p->sc = SC_NAME; /* collected by SC_NAME, this byte included */
            } else if (c == ' ' || c == '\t') {
                fail(p, 400, "obs-fold or whitespace at the start of a field line");
                return i;
            } else if (c == ':') {
                fail(p, 400, "empty field name");
                return i;
            } else {
                fail(p, 400, bad_char_msg(c, "invalid character in field name"));
                return i;
            }
            break;

        case SC_NAME: {
            if (!take_field_bytes(p, s, &i, run_tchar(s, i, len)))
                return i;
            if (i == len)
                break;
            c = s[i];
            if (c == ':') {
                if (!count_header(p, 1))
                    return i;
                p->name_len = bm_str_len(&p->line);
                p->sc = SC_VALUE;
                i++;
            } else if (c == ' ' || c == '\t') {
                fail(p, 400, "whitespace between field name and colon");
                return i;
            } else if (c == '\r' || c == '\n') {
                fail(p, 400, "field line without a colon");
                return i;
            } else {
                fail(p, 400, "invalid character in field name");
                return i;
            }
            break;
        }

        case SC_VALUE: {
            if (!take_field_bytes(p, s, &i, run_value(s, i, len)))
                return i;
            if (i == len)
                break;
            c = s[i];
            if (c == '\r') {
                if (!count_header(p, 1))
                    return i;
                p->sc = SC_VALUE_LF;
                i++;
            } else {
                fail(p, 400, bad_char_msg(c, "control character in field value"));
                return i;
            }
            break;
        }

        case SC_VALUE_LF:
            if (c != '\n') {
                fail(p, 400, "bare CR in request head");
                return i;
            }
            if (!count_header(p, 1) || !commit_field(p))
                return i;
            p->sc = SC_FIELD_START;
            i++;
            break;

        case SC_END_LF:
            if (c != '\n') {
                fail(p, 400, "bare CR in request head");
                return i;
            }
            p->sc = SC_DONE;
            i++;
            break;

        case SC_DONE:
            break;
        }
    }
    if (p->target.oom || p->line.oom)
        fail(p, 500, "out of memory");
    return i;
}

/* ---- checks on the complete head --------------------------------------------------- */

/* Next comma-separated element of a list value; false at the end. Empty elements skipped. */
static bool list_next(const char **cur, const char **tok, size_t *tok_len)
{
    const char *s = *cur;
    for (;;) {
        while (*s == ',' || is_ows(*s))
            s++;
        if (!*s) {
            *cur = s;
            return false;
        }
        const char *start = s;
        while (*s && *s != ',')
            s++;
        const char *end = s;
        while (end > start && is_ows(end[-1]))
            end--;
        if (end > start) {
            *tok = start;
            *tok_len = (size_t)(end - start);
            *cur = s;
            return true;
        }
    }
}

/* reg-name / IP-literal / IPv4, optionally ":port": unreserved, sub-delims, ':', '[', ']',
 * '%' (pct-encoded). Anything else (space, '/', '@', '?', '#') is refused. A table: every
 * Host of every request comes here. */
static const bool host_char[256] = {
    ['a' ... 'z'] = true, ['A' ... 'Z'] = true, ['0' ... '9'] = true, ['-'] = true, ['.'] = true,
    ['_'] = true,         ['~'] = true,         ['!'] = true,         ['$'] = true, ['&'] = true,
    ['\''] = true,        ['('] = true,         [')'] = true,         ['*'] = true, ['+'] = true,
    [','] = true,         [';'] = true,         ['='] = true,         [':'] = true, ['['] = true,
    [']'] = true,         ['%'] = true,
};

static bool valid_host(const char *v)
{
    for (const unsigned char *s = (const unsigned char *)v; *s; s++)
        if (!host_char[*s])
            return false;
    return true;
}

/* What the request line and the framing fields say: read by http-parser, or by the short
 * way (see short_way) for the heads it takes. */
typedef struct framing {
    enum http_method method;
    int major, minor;
    bool has_length; /* a Content-Length was sent */
    uint64_t length; /* its value */
    bool keep_alive; /* http_should_keep_alive */
} framing_t;

/* Returns 0, or fails the parser and returns -1. */
static int check_head(bm_http1_t *p, const framing_t *fr)
{
    if (fr->major != 1) {
        fail(p, 505, "HTTP version not supported");
        return -1;
    }
    if (fr->method == HTTP_CONNECT) {
        fail(p, 501, "CONNECT not supported");
        return -1;
    }
    /* Only a target the proxy forwards as it is: origin-form, ASCII, no dot segment (a
     * client must not climb out of a node's path prefix, nor be answered 503 for a target
     * no node could be asked). */
    const char *bad_target = bm_url_target_problem(bm_str_data(&p->target));
    if (bad_target) {
        fail(p, 400, bad_target);
        return -1;
    }
    bool http11 = fr->minor >= 1;
    size_t hosts = 0;
    const char *host = NULL;
    size_t te_codings = 0;
    bool te_last_chunked = false, te_chunked_early = false;
    bool expect_continue = false;
    for (size_t i = 0; i < p->hdrs.n; i++) {
        const bm_header_t *f = &p->hdrs.items[i];
        if (bm_header_name_is(f->name, f->name_len, "host")) {
            hosts++;
            host = f->value;
        } else if (bm_header_name_is(f->name, f->name_len, "transfer-encoding")) {
            const char *cur = f->value, *tok;
            size_t n;
            while (list_next(&cur, &tok, &n)) {
                if (te_last_chunked)
                    te_chunked_early = true;
                te_codings++;
                te_last_chunked = n == 7 && strncasecmp(tok, "chunked", 7) == 0;
            }
            if (te_codings == 0) {
                fail(p, 400, "empty Transfer-Encoding");
                return -1;
            }
        } else if (bm_header_name_is(f->name, f->name_len, "expect")) {
            if (f->value_len == 12 && strncasecmp(f->value, "100-continue", 12) == 0) {
                expect_continue = http11;
            } else {
                fail(p, 417, "unsupported expectation");
                return -1;
            }
        }
    }
    if (http11 && hosts == 0) {
        fail(p, 400, "missing Host header");
        return -1;
    }
    if (hosts > 1) {
        fail(p, 400, "more than one Host header");
        return -1;
    }
    if (host && !valid_host(host)) {
        fail(p, 400, "invalid Host header");
        return -1;
    }
    bool chunked = false;
    if (te_codings > 0) {
        if (!http11) {
            fail(p, 400, "Transfer-Encoding in an HTTP/1.0 request");
            return -1;
        }
        if (!te_last_chunked || te_chunked_early) {
            fail(p, 400, "Transfer-Encoding must end with chunked");
            return -1;
        }
        if (te_codings > 1) {
            fail(p, 501, "unsupported transfer coding");
            return -1;
        }
        if (fr->has_length) {
            fail(p, 400, "Content-Length repeated or sent with Transfer-Encoding");
            return -1;
        }
        chunked = true;
    }

    int64_t cl = 0;
    if (chunked) {
        cl = -1;
    } else if (fr->has_length) {
        if (fr->length > p->lim.max_body_bytes) {
            fail(p, 413, "request body too large");
            return -1;
        }
        cl = (int64_t)fr->length;
    }

    /* RFC 9110 gives a body of GET and HEAD no meaning; forwarded, it would be read as a
     * POST by some, dropped by others: a smuggling aid. */
    if ((fr->method == HTTP_GET || fr->method == HTTP_HEAD) && cl != 0) {
        fail(p, 400, "a GET or HEAD request must not have a body");
        return -1;
    }

    p->head = (bm_http1_head_t){
        .method = http_method_str(fr->method),
        .target = bm_str_data(&p->target),
        .target_len = bm_str_len(&p->target),
        .version_major = fr->major,
        .version_minor = fr->minor,
        .headers = &p->hdrs,
        .keep_alive = fr->keep_alive,
        .chunked = chunked,
        .content_length = cl,
        .expect_continue = expect_continue && cl != 0,
        .is_head = fr->method == HTTP_HEAD,
    };
    return 0;
}

/* ---- http-parser callbacks ----------------------------------------------------------- */

/* The head is complete and `fr` says how it is framed: check it and hand it on. Returns 0,
 * or fails the parser and returns -1. */
static int head_complete(bm_http1_t *p, const framing_t *fr)
{
    if (check_head(p, fr) != 0)
        return -1;
    p->head_ok = true;
    set_phase(p, BM_HTTP1_BODY);
    if (p->cbs.on_head) {
        int rc = p->cbs.on_head(p->ud, &p->head);
        if (rc != 0) {
            fail_cb(p, rc);
            return -1;
        }
    }
    return 0;
}

static int hp_on_headers_complete(http_parser *hp)
{
    framing_t fr = {
        .method = (enum http_method)hp->method,
        .major = hp->http_major,
        .minor = hp->http_minor,
        .has_length = (hp->flags & F_CONTENTLENGTH) != 0,
        .length = hp->content_length,
        .keep_alive = http_should_keep_alive(hp) != 0,
    };
    return head_complete(hp->data, &fr);
}

/* ---- the short way ------------------------------------------------------------------ */

/* Whether a field name begins, in any case, with one of the names http-parser 2.9 reads
 * for framing (Connection, Proxy-Connection, Content-Length, Transfer-Encoding, Upgrade).
 * A prefix, not the name: 2.9 flags Transfer-Encoding on any name that begins with it. */
static bool framing_name(const char *n, size_t len)
{
#define BEGINS(lit) (len >= sizeof lit - 1 && bm_ascii_case_eq(n, lit, sizeof lit - 1))
    switch (n[0] | 0x20) {
    case 'c':
        return BEGINS("connection") || BEGINS("content-length");
    case 'p':
        return BEGINS("proxy-connection");
    case 't':
        return BEGINS("transfer-encoding");
    case 'u':
        return BEGINS("upgrade");
    default:
        return false;
    }
#undef BEGINS
}

/*
 * Whether the head the scanner just read whole, in one feed from its first byte, can be
 * framed without http-parser, and how (into *fr). It is the common request: a GET or HEAD
 * in HTTP/1.1, to an origin-form target, without a field http-parser reads for framing
 * (Connection is allowed as exactly `keep-alive`, which changes nothing in 1.1). For such
 * a head http-parser would find nothing to refuse (the scanner already accepted every
 * byte, and every target byte the scanner takes after a `/` is one of http-parser's URL
 * bytes) and would say: that method, 1.1, no body, keep-alive; so both ways give the same
 * events, checked by the split tests and fuzz/fuzz_http1.c (a head fed byte by byte never
 * takes the short way). Everything else goes to http-parser, as before. It saves reading
 * every request twice: 4.2k of the 21k instructions of an attestation_data answer.
 */
static bool short_way(const bm_http1_t *p, framing_t *fr)
{
    if (p->hp_closed || p->version[0] != '1' || p->version[1] != '1' ||
        bm_str_data(&p->target)[0] != '/')
        return false;
    if (p->method_len == 3 && memcmp(p->method_at, "GET", 3) == 0)
        fr->method = HTTP_GET;
    else if (p->method_len == 4 && memcmp(p->method_at, "HEAD", 4) == 0)
        fr->method = HTTP_HEAD;
    else
        return false;
    for (size_t i = 0; i < p->hdrs.n; i++) {
        const bm_header_t *f = &p->hdrs.items[i];
        if (!framing_name(f->name, f->name_len))
            continue;
        if (f->name_len == 10 && f->value_len == 10 &&
            bm_ascii_case_eq(f->name, "connection", 10) &&
            bm_ascii_case_eq(f->value, "keep-alive", 10))
            continue;
        return false;
    }
    fr->major = 1;
    fr->minor = 1;
    fr->has_length = false;
    fr->length = 0;
    fr->keep_alive = true;
    return true;
}

/*
 * The short way's ending of the head of `n` bytes, as http-parser would have ended it: the
 * head checked and handed on, the message complete (no body), `n` bytes consumed; on a
 * refusal, the last byte (the final LF) left unconsumed, as http-parser leaves it.
 */
static size_t take_short(bm_http1_t *p, const framing_t *fr, size_t n)
{
    p->short_heads++;
    if (head_complete(p, fr) != 0) {
        p->pos += n - 1;
        return n - 1;
    }
    p->complete = true;
    p->pos += n;
    return n;
}

/* True (and the parser failed) when the framing before position `at` ran too long. */
static bool gap_too_long(bm_http1_t *p, uint64_t at)
{
    if (at - p->last_data_end > p->lim.max_header_bytes) {
        fail(p, 400, "chunk framing or trailer section too long");
        return true;
    }
    return false;
}

static int hp_on_body(http_parser *hp, const char *at, size_t n)
{
    bm_http1_t *p = hp->data;
    uint64_t start = p->cur_pos + (uint64_t)(at - p->cur_base);
    if (gap_too_long(p, start))
        return -1;
    p->last_data_end = start + n;
    bool over = p->body_bytes + n > p->lim.max_body_bytes;
    if (over) /* deliver exactly up to the limit, wherever the input was split */
        n = (size_t)(p->lim.max_body_bytes - p->body_bytes);
    if (n > 0) {
        p->body_bytes += n;
        if (p->cbs.on_body) {
            int rc = p->cbs.on_body(p->ud, at, n);
            if (rc != 0) {
                fail_cb(p, rc);
                return -1;
            }
        }
    }
    if (over) {
        fail(p, 413, "request body too large");
        return -1;
    }
    return 0;
}

static int hp_on_message_complete(http_parser *hp)
{
    bm_http1_t *p = hp->data;
    p->complete = true;
    http_parser_pause(hp, 1);
    return 0;
}

/* ---- public API ---------------------------------------------------------------------- */

static uint32_t hp_max_header_size = HTTP_MAX_HEADER_SIZE;

bm_http1_t *bm_http1_new(const bm_http1_limits_t *limits, const bm_http1_callbacks_t *cbs, void *ud)
{
    bm_http1_t *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    if (limits)
        p->lim = *limits;
    else
        bm_http1_limits_default(&p->lim);
    if (cbs)
        p->cbs = *cbs;
    p->ud = ud;
    bm_hdrs_init(&p->hdrs);

    if (!hp_settings.on_headers_complete) {
        http_parser_settings_init(&hp_settings);
        hp_settings.on_headers_complete = hp_on_headers_complete;
        hp_settings.on_body = hp_on_body;
        hp_settings.on_message_complete = hp_on_message_complete;
    }
    /* http-parser counts the request line, the fields and the trailers against one
     * process-wide limit. Ours are stricter, so lift its limit above everything our limits
     * allow (head and a trailer section), and never lower it for other parsers. */
    uint64_t need =
        (uint64_t)p->lim.max_target_bytes + 2 * (uint64_t)p->lim.max_header_bytes + 64 * 1024;
    if (need > UINT32_MAX)
        need = UINT32_MAX;
    if (need > hp_max_header_size) {
        hp_max_header_size = (uint32_t)need;
        http_parser_set_max_header_size(hp_max_header_size);
    }

    http_parser_init(&p->hp, HTTP_REQUEST);
    p->hp.data = p;
    return p;
}

void bm_http1_free(bm_http1_t *p)
{
    if (!p)
        return;
    bm_str_dispose(&p->target);
    bm_str_dispose(&p->line);
    bm_hdrs_dispose(&p->hdrs);
    free(p);
}

void bm_http1_next(bm_http1_t *p)
{
    if (p->phase != BM_HTTP1_COMPLETE)
        return;
    http_parser_pause(&p->hp, 0);
    /* http-parser refuses anything after a message without keep-alive: so must we */
    if (!p->head.keep_alive)
        p->hp_closed = true;
    set_phase(p, BM_HTTP1_IDLE);
    p->sc = SC_START;
    p->header_bytes = 0;
    p->name_len = 0;
    bm_str_clear(&p->target);
    bm_str_clear(&p->line);
    bm_hdrs_clear(&p->hdrs);
    p->head_ok = false;
    p->complete = false;
    p->body_bytes = 0;
    p->pos = 0;
    p->last_data_end = 0;
}

/* Runs http-parser over data[0..len) and folds its outcome into our phase. */
static size_t run_parser(bm_http1_t *p, const char *data, size_t len)
{
    p->cur_base = data;
    p->cur_pos = p->pos;
    size_t m = http_parser_execute(&p->hp, &hp_settings, data, len);
    p->pos += m;
    if (p->phase == BM_HTTP1_FAILED)
        return m;
    enum http_errno e = HTTP_PARSER_ERRNO(&p->hp);
    if (e != HPE_OK && e != HPE_PAUSED) {
        /* The framing before the bad byte may already have been too long. */
        if (p->head_ok && gap_too_long(p, p->pos))
            return m;
        fail_parser(p, e);
    }
    return m;
}

/*
 * Feeds data[0..len) of a request head: the scanner first, then http-parser up to where the
 * scanner stopped, or the short way when the scanner read the whole head and http-parser
 * had seen none of it. Returns the bytes consumed.
 */
static size_t feed_head(bm_http1_t *p, const char *data, size_t len)
{
    set_phase(p, BM_HTTP1_HEAD);
    bool fresh = p->pos == 0; /* http-parser has seen no byte of this message */
    size_t n = scan_head(p, (const unsigned char *)data, len);
    bool scan_failed = p->phase == BM_HTTP1_FAILED;
    size_t m;
    framing_t fr;
    if (fresh && !scan_failed && p->sc == SC_DONE && short_way(p, &fr)) {
        m = take_short(p, &fr, n);
    } else {
        if (scan_failed)
            set_phase(p, BM_HTTP1_HEAD); /* let http-parser report an earlier error */
        int saved_status = p->err_status;
        const char *saved_msg = p->err_msg;
        /* A zero length would tell http-parser that the stream ended. */
        m = n > 0 ? run_parser(p, data, n) : 0;
        if (p->phase != BM_HTTP1_FAILED && scan_failed) {
            p->err_status = 0;
            fail(p, saved_status, saved_msg);
        }
    }
    if (p->phase == BM_HTTP1_BODY)
        p->last_data_end = p->pos;
    return m;
}

bm_http1_result_t bm_http1_feed(bm_http1_t *p, const char *data, size_t len, size_t *consumed)
{
    size_t off = 0;
    *consumed = 0;
    if (p->phase == BM_HTTP1_FAILED)
        return BM_HTTP1_ERROR;
    if (p->phase == BM_HTTP1_COMPLETE)
        return BM_HTTP1_DONE;

    while (off < len) {
        size_t m;
        if (p->phase == BM_HTTP1_IDLE || p->phase == BM_HTTP1_HEAD) {
            m = feed_head(p, data + off, len - off);
            off += m;
        } else {
            m = run_parser(p, data + off, len - off);
            off += m;
        }
        if (p->phase == BM_HTTP1_FAILED) {
            *consumed = off;
            return BM_HTTP1_ERROR;
        }
        if (p->complete) {
            if (gap_too_long(p, p->pos)) {
                *consumed = off;
                return BM_HTTP1_ERROR;
            }
            set_phase(p, BM_HTTP1_COMPLETE);
            *consumed = off;
            if (p->cbs.on_complete)
                p->cbs.on_complete(p->ud);
            return BM_HTTP1_DONE;
        }
        if (m == 0)
            break; /* cannot happen without an error; never spin */
    }
    if (p->phase == BM_HTTP1_BODY && gap_too_long(p, p->pos)) {
        *consumed = off;
        return BM_HTTP1_ERROR;
    }
    *consumed = off;
    return BM_HTTP1_MORE;
}

bm_http1_phase_t bm_http1_phase(const bm_http1_t *p)
{
    return p->phase;
}

const bm_http1_head_t *bm_http1_head(const bm_http1_t *p)
{
    return p->head_ok ? &p->head : NULL;
}

uint64_t bm_http1_body_bytes(const bm_http1_t *p)
{
    return p->body_bytes;
}

int bm_http1_error_status(const bm_http1_t *p)
{
    return p->phase == BM_HTTP1_FAILED ? p->err_status : 0;
}

uint64_t bm_http1_short_heads(const bm_http1_t *p)
{
    return p->short_heads;
}

const char *bm_http1_error_message(const bm_http1_t *p)
{
    return p->phase == BM_HTTP1_FAILED && p->err_msg ? p->err_msg : "";
}
