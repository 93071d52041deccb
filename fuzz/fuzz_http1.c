/* SPDX-License-Identifier: MIT */
/*
 * fuzz_http1: libFuzzer harness for the request parser. The input is parsed whole, then
 * split once and twice at positions derived from the input, then byte by byte; each run
 * records its events (head with every field, body bytes, completion, error status and
 * message) and the four records must be identical, byte for byte. A head read whole may
 * take the parser's short way (no http-parser); fed byte by byte it never does, so this
 * also compares the short way with http-parser on every input. Small limits let the fuzzer reach
 * 413, 414 and 431. Body bytes are recorded as one run per message: how they are cut into on_body
 * calls depends on the splits, the bytes themselves must not.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "http/http1.h"

typedef struct rec {
    bm_str_t log;
    bm_str_t body;
} rec_t;

static void flush_body(rec_t *r)
{
    if (bm_str_len(&r->body) == 0)
        return;
    bm_str_printf(&r->log, "B%zu:", bm_str_len(&r->body));
    bm_str_append(&r->log, bm_str_data(&r->body), bm_str_len(&r->body));
    bm_str_clear(&r->body);
}

static void put_counted(bm_str_t *s, const char *p, size_t n)
{
    bm_str_printf(s, "%zu:", n);
    if (n)
        bm_str_append(s, p, n);
}

static int on_head(void *ud, const bm_http1_head_t *h)
{
    rec_t *r = ud;
    if (h->target_len != strlen(h->target))
        __builtin_trap();
    bm_str_printf(&r->log, "H %s ", h->method);
    put_counted(&r->log, h->target, h->target_len);
    bm_str_printf(&r->log, " %d.%d ka=%d cl=%lld ch=%d ex=%d hd=%d n=%zu", h->version_major,
                  h->version_minor, h->keep_alive, (long long)h->content_length, h->chunked,
                  h->expect_continue, h->is_head, h->headers->n);
    for (size_t i = 0; i < h->headers->n; i++) {
        const bm_header_t *f = &h->headers->items[i];
        bm_str_putc(&r->log, ' ');
        put_counted(&r->log, f->name, f->name_len);
        bm_str_putc(&r->log, '=');
        put_counted(&r->log, f->value, f->value_len);
    }
    bm_str_putc(&r->log, '\n');
    return 0;
}

static int on_body(void *ud, const char *p, size_t n)
{
    rec_t *r = ud;
    if (n == 0)
        __builtin_trap();
    bm_str_append(&r->body, p, n);
    return 0;
}

static void on_complete(void *ud)
{
    rec_t *r = ud;
    flush_body(r);
    bm_str_puts(&r->log, "C\n");
}

/* Parses data split at cuts[0..ncuts) (sorted) and returns the record (caller frees). */
static bm_buf_t *record(const uint8_t *data, size_t size, const size_t *cuts, size_t ncuts)
{
    static const bm_http1_callbacks_t cbs = {on_head, on_body, on_complete};
    bm_http1_limits_t lim = {
        .max_target_bytes = 64, .max_header_bytes = 256, .max_body_bytes = 1024};
    rec_t r = {BM_STR_INIT, BM_STR_INIT};
    bm_http1_t *p = bm_http1_new(&lim, &cbs, &r);
    if (!p)
        abort();
    size_t start = 0;
    bool failed = false;
    for (size_t c = 0; c <= ncuts && !failed; c++) {
        size_t end = c < ncuts ? cuts[c] : size;
        size_t off = start;
        while (off < end) {
            size_t used = 0;
            bm_http1_result_t res = bm_http1_feed(p, (const char *)data + off, end - off, &used);
            if (used > end - off)
                __builtin_trap();
            off += used;
            if (res == BM_HTTP1_ERROR) {
                flush_body(&r);
                bm_str_printf(&r.log, "E %d %s\n", bm_http1_error_status(p),
                              bm_http1_error_message(p));
                failed = true;
                break;
            }
            if (res == BM_HTTP1_DONE)
                bm_http1_next(p);
            else if (off != end)
                __builtin_trap(); /* MORE means every byte was taken */
        }
        start = end;
    }
    if (!failed) {
        flush_body(&r);
        bm_str_printf(&r.log, "P %d\n", (int)bm_http1_phase(p));
    }
    bm_http1_free(p);
    bm_str_dispose(&r.body);
    bm_buf_t *out = bm_str_finish(&r.log);
    if (!out)
        abort();
    return out;
}

static bool same(const bm_buf_t *a, const bm_buf_t *b)
{
    return a->len == b->len && memcmp(a->data, b->data, a->len) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
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
    bm_buf_t *whole = record(data, size, NULL, 0);
    bm_buf_t *a = record(data, size, &one, 1);
    bm_buf_t *b = record(data, size, two, 2);
    size_t *every = malloc((size + 1) * sizeof *every);
    if (!every)
        abort();
    for (size_t i = 0; i < size; i++)
        every[i] = i + 1;
    bm_buf_t *c = record(data, size, every, size);
    free(every);
    if (!same(whole, a) || !same(whole, b) || !same(whole, c)) {
        fprintf(stderr,
                "split mismatch (cut %zu / %zu,%zu)\n--- whole\n%.*s\n--- one\n%.*s\n"
                "--- two\n%.*s\n--- byte by byte\n%.*s\n",
                one, two[0], two[1], (int)whole->len, whole->data, (int)a->len, a->data,
                (int)b->len, b->data, (int)c->len, c->data);
        __builtin_trap();
    }
    bm_buf_unref(whole);
    bm_buf_unref(a);
    bm_buf_unref(b);
    bm_buf_unref(c);
    return 0;
}
