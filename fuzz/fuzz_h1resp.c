/* SPDX-License-Identifier: MIT */
/*
 * fuzz_h1resp: libFuzzer harness for the upstream response parser (src/http/h1resp.c), the
 * path every byte a node sends over http:// takes. The first input byte says whether the
 * request was HEAD (bit 0); the rest is what the node sent. It is parsed whole, split once
 * and twice at positions derived from the input, and fed byte by byte; the connection
 * closes after the last byte. Each run records its events (the head with every field,
 * the body bytes, the end with keep-alive and the bytes left after it, or the error with
 * its code and text) and the four records must be identical, byte for byte: the same
 * answer for any split. A small head limit (256 bytes) lets the fuzzer reach it.
 *
 * Also checked on every event: *used never passes what was given, data lies inside the
 * input given, MORE means everything given was taken, a head has a status of 200 to 999.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/hdrs.h"
#include "http/h1resp.h"

#define MAX_HEAD 256

static void put_counted(bm_str_t *s, const char *p, size_t n)
{
    bm_str_printf(s, "%zu:", n);
    if (n)
        bm_str_append(s, p, n);
}

static void flush_body(bm_str_t *log, bm_str_t *body)
{
    if (bm_str_len(body) == 0)
        return;
    bm_str_printf(log, "B");
    put_counted(log, bm_str_data(body), bm_str_len(body));
    bm_str_putc(log, '\n');
    bm_str_clear(body);
}

static void log_head(bm_str_t *log, const bm_h1resp_t *r, const bm_hdrs_t *h)
{
    int status = bm_h1resp_status(r);
    if (status < 200 || status > 999)
        __builtin_trap();
    bm_str_printf(log, "H %d len=%lld n=%zu", status, (long long)bm_h1resp_body_length(r), h->n);
    for (size_t i = 0; i < h->n; i++) {
        const bm_header_t *f = &h->items[i];
        if (f->name_len != strlen(f->name) || f->value_len != strlen(f->value))
            __builtin_trap(); /* no NUL inside a field */
        bm_str_putc(log, ' ');
        put_counted(log, f->name, f->name_len);
        bm_str_putc(log, '=');
        put_counted(log, f->value, f->value_len);
    }
    bm_str_putc(log, '\n');
}

static void log_error(bm_str_t *log, const bm_h1resp_t *r)
{
    const char *detail = NULL;
    int err = bm_h1resp_error(r, &detail);
    if (err >= 0)
        __builtin_trap(); /* an error event always has a code */
    bm_str_printf(log, "E %d %s\n", err, detail ? detail : "");
}

/* Parses data (split at cuts[0..ncuts), sorted) and returns the record (caller frees). */
static bm_buf_t *record(const uint8_t *data, size_t size, bool head_req, const size_t *cuts,
                        size_t ncuts)
{
    bm_h1resp_t *r = bm_h1resp_new(MAX_HEAD);
    if (!r)
        abort();
    bm_hdrs_t h;
    bm_hdrs_init(&h);
    bm_h1resp_reset(r, head_req, &h);
    bm_str_t log = BM_STR_INIT, body = BM_STR_INIT;
    const char *in = (const char *)data;
    size_t pos = 0;
    bool ended = false;
    for (size_t c = 0; c <= ncuts && !ended; c++) {
        size_t end = c < ncuts ? cuts[c] : size;
        while (!ended) {
            size_t used = 0, len = 0;
            const char *d = NULL;
            bm_h1resp_ev_t ev = bm_h1resp_next(r, in + pos, end - pos, &used, &d, &len);
            if (used > end - pos)
                __builtin_trap();
            if (ev == BM_H1RESP_DATA && (len == 0 || d < in + pos || d + len > in + end))
                __builtin_trap(); /* data lies in what was given */
            pos += used;
            if (ev == BM_H1RESP_MORE) {
                if (pos != end)
                    __builtin_trap();
                break;
            } else if (ev == BM_H1RESP_HEAD) {
                flush_body(&log, &body);
                log_head(&log, r, &h);
            } else if (ev == BM_H1RESP_DATA) {
                bm_str_append(&body, d, len);
            } else if (ev == BM_H1RESP_DONE) {
                flush_body(&log, &body);
                bm_str_printf(&log, "D ka=%d rest=%zu\n", bm_h1resp_keep_alive(r), size - pos);
                ended = true;
            } else {
                flush_body(&log, &body);
                log_error(&log, r);
                ended = true;
            }
        }
    }
    if (!ended) {
        flush_body(&log, &body);
        if (bm_h1resp_eof(r) == BM_H1RESP_DONE)
            bm_str_printf(&log, "EOF D ka=%d\n", bm_h1resp_keep_alive(r));
        else
            log_error(&log, r);
    }
    bm_h1resp_free(r);
    bm_hdrs_dispose(&h);
    bm_str_dispose(&body);
    bm_buf_t *out = bm_str_finish(&log);
    if (!out)
        abort();
    return out;
}

static bool same(const bm_buf_t *a, const bm_buf_t *b)
{
    return a->len == b->len && memcmp(a->data, b->data, a->len) == 0;
}

static void mismatch(const char *what, const bm_buf_t *whole, const bm_buf_t *other)
{
    fprintf(stderr, "split mismatch (%s)\n--- whole\n%.*s\n--- %s\n%.*s\n", what, (int)whole->len,
            whole->data, what, (int)other->len, other->data);
    __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    bool head_req = data[0] & 1;
    data++;
    size--;
    uint32_t h = 2166136261u; /* FNV-1a of the input picks the split points */
    for (size_t i = 0; i < size; i++)
        h = (h ^ data[i]) * 16777619u;
    size_t one = h % (size + 1);
    size_t two[2] = {(h >> 7) % (size + 1), (h >> 19) % (size + 1)};
    if (two[0] > two[1]) {
        size_t t = two[0];
        two[0] = two[1];
        two[1] = t;
    }
    bm_buf_t *whole = record(data, size, head_req, NULL, 0);
    bm_buf_t *a = record(data, size, head_req, &one, 1);
    bm_buf_t *b = record(data, size, head_req, two, 2);
    if (!same(whole, a))
        mismatch("one cut", whole, a);
    if (!same(whole, b))
        mismatch("two cuts", whole, b);
    if (size <= 4096) {
        size_t *every = malloc((size ? size : 1) * sizeof *every);
        if (!every)
            abort();
        for (size_t i = 0; i < size; i++)
            every[i] = i;
        bm_buf_t *c = record(data, size, head_req, every, size);
        if (!same(whole, c))
            mismatch("byte by byte", whole, c);
        bm_buf_unref(c);
        free(every);
    }
    bm_buf_unref(whole);
    bm_buf_unref(a);
    bm_buf_unref(b);
    return 0;
}
