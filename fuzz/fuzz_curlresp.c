/* SPDX-License-Identifier: MIT */
/*
 * fuzz_curlresp: libFuzzer harness for the response path of the libcurl transport
 * (src/http/upstream_curl.c), the path every byte an https:// node sends takes once
 * libcurl has decrypted and de-framed it. No socket and no libcurl transfer: the input is
 * fed, as libcurl feeds it, into the very callbacks libcurl calls, on_header (one call per
 * head line, its CRLF included, interim heads too) and on_body (pieces of the body), and
 * the transfer is then finished with the code libcurl would end it with. To reach those
 * static functions this file includes upstream_curl.c itself; the archive's copy of the
 * module is then never linked in (every symbol it defines is defined here first).
 *
 * Input: byte 0 is flags (bit 0: the request was HEAD; bit 1: stream mode, the body goes
 * to on_data; bit 2: gzip was asked for, so a gzip Content-Encoding and its length are
 * dropped from the head as libcurl inflates), byte 1 the response size limit (16 + 4 *
 * value bytes, small so that the fuzzer reaches it), byte 2 the seed of the body's split.
 * The rest is the node's answer: lines up to the end of the first head whose status is not
 * 1xx (a 1xx head and the lines after it go on), then the body. libcurl itself stops a
 * body at its Content-Length and ends with CURLE_PARTIAL_FILE when fewer bytes came; the
 * harness does the same, and ends with CURLE_WRITE_ERROR when a callback refused.
 *
 * Each input runs twice, the body given whole and split at positions from byte 2, and
 * both records (the head with every field, the body or streamed bytes, the end with its
 * error, status and detail) must be identical. Checked on every run:
 *   - success means a final status (200..999) whose head was delivered once, before the
 *     end; a buffered body never larger than the limit, and exactly the announced length
 *     when a valid Content-Length came (not for HEAD, 204, 304 or an inflated body);
 *   - no interim (1xx) status ever reaches on_head; an unexpected 1xx (101 above all) or an
 *     invalid or repeated Content-Length is a failure, never a complete-looking answer;
 *   - a failure has a code and a non-empty description, and no body.
 */
#include "http/upstream_curl.c"

#include <stdio.h>

#define MAX_PIECES 8

typedef struct run {
    bm_str_t log;
    bm_str_t streamed;
    int heads;
    int head_status;
    bool done;
    int err;
    int status;
    size_t body_len;
    bool have_body;
} run_t;

static uv_loop_t g_loop;
static bm_upcurl_t *g_up;

static void put_counted(bm_str_t *s, const char *p, size_t n)
{
    bm_str_printf(s, "%zu:", n);
    if (n)
        bm_str_append(s, p, n);
}

static void rec_head(bm_xfer_t *bx, int status, const bm_hdrs_t *h, void *ud)
{
    (void)bx;
    run_t *r = ud;
    if (status < 200 || status > 999 || r->done)
        __builtin_trap(); /* an interim or invalid status never reaches the owner */
    r->heads++;
    r->head_status = status;
    bm_str_printf(&r->log, "H %d n=%zu", status, h->n);
    for (size_t i = 0; i < h->n; i++) {
        bm_str_putc(&r->log, ' ');
        put_counted(&r->log, h->items[i].name, h->items[i].name_len);
        bm_str_putc(&r->log, '=');
        put_counted(&r->log, h->items[i].value, h->items[i].value_len);
    }
    bm_str_putc(&r->log, '\n');
}

static int rec_data(bm_xfer_t *bx, const char *p, size_t n, void *ud)
{
    (void)bx;
    run_t *r = ud;
    if (r->heads != 1 || r->done)
        __builtin_trap(); /* data only after the head, before the end */
    bm_str_append(&r->streamed, p, n);
    return 0;
}

static void rec_done(bm_xfer_t *bx, const bm_xfer_result_t *res, void *ud)
{
    (void)bx;
    run_t *r = ud;
    if (r->done)
        __builtin_trap(); /* on_done runs once */
    r->done = true;
    r->err = res->err;
    r->status = res->status;
    r->have_body = res->body != NULL;
    r->body_len = res->body ? res->body->len : 0;
    if (res->err) {
        if (res->err > 0 || !res->detail || !res->detail[0] || res->body)
            __builtin_trap(); /* a failure has a code, a description and no body */
    } else if (res->status < 200 || r->heads != 1 || r->head_status != res->status) {
        __builtin_trap(); /* success is a final answer whose head was delivered */
    }
    bm_str_printf(&r->log, "E %d %d %s\n", res->err, res->status, res->detail);
    bm_str_append(&r->log, "S", 1);
    put_counted(&r->log, bm_str_data(&r->streamed), bm_str_len(&r->streamed));
    if (res->body) {
        bm_str_append(&r->log, " B", 2);
        put_counted(&r->log, (const char *)res->body->data, res->body->len);
    }
    bm_str_putc(&r->log, '\n');
}

/* A transfer as bm_upcurl_start leaves it once libcurl runs it, without the libcurl part. */
static cx_t *start(run_t *r, bool head, bool stream, bool gzip, size_t max_bytes)
{
    cx_t *x = xfer_get(g_up);
    if (!x)
        abort();
    x->cbs = (bm_xfer_cbs_t){.on_head = rec_head, .on_data = rec_data, .on_done = rec_done};
    x->ud = r;
    x->stream = stream;
    x->gzip = gzip;
    x->max_bytes = max_bytes;
    strcpy(x->method, head ? "HEAD" : "GET");
    x->t_start = bm_clock_mono_us();
    x->state = XS_RUNNING;
    bm_list_push_front(&g_up->xfers, &x->live);
    g_up->active++;
    return x;
}

/* The harness's own reading of the framing fields of the head being fed, independent of
 * the module's: how many Content-Length fields, whether all were valid (1 to 19 digits, at
 * most 2^63 - 1), their value, and whether Transfer-Encoding came too. */
typedef struct framing {
    int n_cl;
    bool cl_bad;
    bool te;
    int64_t cl;
} framing_t;

static bool name_is(const char *p, size_t n, const char *want)
{
    return n == strlen(want) && strncasecmp(p, want, n) == 0;
}

static void framing_line(framing_t *f, const char *p, size_t len)
{
    while (len && (p[len - 1] == '\n' || p[len - 1] == '\r'))
        len--;
    if (len >= 5 && memcmp(p, "HTTP/", 5) == 0) {
        memset(f, 0, sizeof *f); /* a new head */
        return;
    }
    const char *colon = memchr(p, ':', len);
    if (!colon || p[0] == ' ' || p[0] == '\t')
        return;
    size_t nlen = (size_t)(colon - p);
    while (nlen && (p[nlen - 1] == ' ' || p[nlen - 1] == '\t'))
        nlen--;
    const char *v = colon + 1, *end = p + len;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    size_t vlen = (size_t)(end - v);
    if (name_is(p, nlen, "Transfer-Encoding")) {
        f->te = true;
    } else if (name_is(p, nlen, "Content-Length")) {
        f->n_cl++;
        bool digits = vlen >= 1 && vlen <= 19;
        for (size_t i = 0; i < vlen && digits; i++)
            digits = v[i] >= '0' && v[i] <= '9';
        if (digits && vlen == 19 && memcmp(v, "9223372036854775807", 19) > 0)
            digits = false;
        if (!digits) {
            f->cl_bad = true;
            return;
        }
        f->cl = 0;
        for (size_t i = 0; i < vlen; i++)
            f->cl = f->cl * 10 + (v[i] - '0');
    }
}

/* The body length libcurl itself goes by: a valid, single Content-Length; -1 otherwise
 * (libcurl reads some invalid ones its own way, which the module refuses before). */
static int64_t wire_length(const framing_t *f)
{
    return f->n_cl == 1 && !f->cl_bad && !f->te ? f->cl : -1;
}

static bool framing_invalid(const framing_t *f)
{
    return f->cl_bad || f->n_cl > 1 || (f->n_cl && f->te);
}

/* Feeds head lines; returns the offset of the body, or -1 when a callback refused. */
static long feed_head(cx_t *x, const char *p, size_t n, framing_t *f)
{
    size_t off = 0;
    while (off < n && !x->head_done) {
        const char *nl = memchr(p + off, '\n', n - off);
        size_t len = nl ? (size_t)(nl - (p + off)) + 1 : n - off;
        framing_line(f, p + off, len);
        /* libcurl hands over a private copy of the line; so does the harness (exact size) */
        char *line = malloc(len ? len : 1);
        if (!line)
            abort();
        memcpy(line, p + off, len);
        size_t got = on_header(line, 1, len, x);
        free(line);
        if (got != len)
            return -1;
        off += len;
        if (!nl)
            break; /* the connection closed inside the head */
    }
    return (long)off;
}

/* One whole exchange; the record goes to r->log. */
static void exchange(run_t *r, const uint8_t *data, size_t size, const size_t *cuts, size_t ncuts)
{
    bool head = data[0] & 1, stream = data[0] & 2, gzip = data[0] & 4;
    size_t max_bytes = 16 + 4 * (size_t)data[1];
    const char *p = (const char *)data + 3;
    size_t n = size - 3;
    cx_t *x = start(r, head, stream, gzip, max_bytes);
    framing_t f = {0};
    CURLcode code = CURLE_OK;
    long body_at = feed_head(x, p, n, &f);
    int64_t cl = wire_length(&f);
    if (body_at < 0) {
        code = CURLE_WRITE_ERROR;
    } else if (x->head_done && !head && x->status != 204 && x->status != 304) {
        size_t blen = n - (size_t)body_at;
        if (cl >= 0 && (uint64_t)cl < blen)
            blen = (size_t)cl; /* libcurl stops at the announced length */
        if (cl >= 0 && (uint64_t)blen < (uint64_t)cl)
            code = CURLE_PARTIAL_FILE;
        const char *b = p + body_at;
        size_t at = 0;
        for (size_t i = 0; i <= ncuts && code != CURLE_WRITE_ERROR; i++) {
            size_t end = i < ncuts && cuts[i] < blen ? cuts[i] : blen;
            if (end <= at && i < ncuts)
                continue;
            size_t piece = end - at;
            if (piece == 0)
                break;
            char *copy = malloc(piece);
            if (!copy)
                abort();
            memcpy(copy, b + at, piece);
            size_t got = on_body(copy, 1, piece, x);
            free(copy);
            if (got != piece)
                code = CURLE_WRITE_ERROR;
            at = end;
        }
    }
    /* what a complete answer must measure: the announced length (libcurl inflates a gzip
     * body, which the harness does not model, so an asked-for gzip is not measured) */
    bool framed = cl >= 0 && x->head_done && !head && x->status != 204 && x->status != 304 && !gzip;
    bool final_head = x->head_done;
    finish(g_up, x, code);
    if (!r->done)
        __builtin_trap(); /* every finished transfer reports */
    if (r->err == 0 && final_head && framing_invalid(&f))
        __builtin_trap(); /* an impossible length never becomes a complete-looking answer */
    if (r->err == 0 && !stream) {
        if (!r->have_body || r->body_len > max_bytes)
            __builtin_trap();
        if (framed && r->body_len != (size_t)cl)
            __builtin_trap(); /* a complete-looking answer is exactly as long as announced */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3 || size > 8192)
        return 0;
    if (!g_up) {
        bm_log_setup(BM_LOG_OFF, BM_LOG_TEXT, stderr);
        if (uv_loop_init(&g_loop) != 0)
            abort();
        bm_upstream_opts_t opts;
        memset(&opts, 0, sizeof opts);
        g_up = bm_upcurl_new(&g_loop, &opts, NULL, NULL);
        if (!g_up)
            abort();
    }
    size_t cuts[MAX_PIECES];
    size_t ncuts = 0;
    unsigned seed = data[2];
    size_t body_guess = size;
    for (size_t at = 0; ncuts < MAX_PIECES && seed; seed >>= 1) {
        at += 1 + (seed & 1) + (size_t)data[2] % 7;
        if (at >= body_guess)
            break;
        cuts[ncuts++] = at;
    }

    run_t a = {0}, b = {0};
    exchange(&a, data, size, NULL, 0);
    exchange(&b, data, size, cuts, ncuts);
    if (bm_str_len(&a.log) != bm_str_len(&b.log) ||
        memcmp(bm_str_data(&a.log), bm_str_data(&b.log), bm_str_len(&a.log)) != 0) {
        fprintf(stderr, "whole:\n%.*s\nsplit:\n%.*s\n", (int)bm_str_len(&a.log),
                bm_str_data(&a.log), (int)bm_str_len(&b.log), bm_str_data(&b.log));
        __builtin_trap(); /* the same answer for any split of the body */
    }
    bm_str_dispose(&a.log);
    bm_str_dispose(&a.streamed);
    bm_str_dispose(&b.log);
    bm_str_dispose(&b.streamed);
    return 0;
}
