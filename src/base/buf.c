/* SPDX-License-Identifier: MIT */
/*
 * buf: allocation and reference counting of bm_buf_t, and the bm_str_t builder, which
 * grows a bm_buf_t in place so that finishing it costs nothing.
 */
#include "base/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"

void *bm_grow(void *items, size_t n, size_t *cap, size_t size, size_t first)
{
    if (n < *cap)
        return items;
    size_t ncap = *cap ? *cap * 2 : first;
    if (ncap > SIZE_MAX / size)
        return NULL;
    void *grown = realloc(items, ncap * size);
    if (grown)
        *cap = ncap;
    return grown;
}

bm_buf_t *bm_buf_new(size_t cap)
{
    bm_buf_t *b = malloc(sizeof *b + cap + 1);
    if (!b)
        return NULL;
    b->refs = 1;
    b->len = 0;
    b->cap = cap;
    b->data[0] = '\0';
    return b;
}

bm_buf_t *bm_buf_copy(const void *p, size_t n)
{
    bm_buf_t *b = bm_buf_new(n);
    if (!b)
        return NULL;
    if (n)
        memcpy(b->data, p, n);
    b->data[n] = '\0';
    b->len = n;
    return b;
}

bm_buf_t *bm_buf_from_str(const char *s)
{
    return bm_buf_copy(s, strlen(s));
}

bm_buf_t *bm_buf_ref(bm_buf_t *b)
{
    if (b) {
        bm_assert(b->refs > 0);
        b->refs++;
    }
    return b;
}

void bm_buf_unref(bm_buf_t *b)
{
    if (!b)
        return;
    bm_assert(b->refs > 0);
    if (--b->refs == 0)
        free(b);
}

int bm_str_reserve(bm_str_t *s, size_t extra)
{
    if (s->oom)
        return BM_ENOMEM;
    size_t len = s->b ? s->b->len : 0;
    size_t cap = s->b ? s->b->cap : 0;
    if (len + extra <= cap)
        return 0;
    size_t ncap = cap ? cap : 64;
    while (ncap < len + extra)
        ncap *= 2;
    bm_buf_t *nb = realloc(s->b, sizeof *nb + ncap + 1);
    if (!nb) {
        s->oom = true;
        return BM_ENOMEM;
    }
    if (!s->b) {
        nb->refs = 1;
        nb->len = 0;
    }
    nb->cap = ncap;
    s->b = nb;
    return 0;
}

void bm_str_append(bm_str_t *s, const void *p, size_t n)
{
    /* reserve at least one byte so that an empty builder still gets its buffer */
    if (bm_str_reserve(s, n ? n : 1) != 0)
        return;
    if (n)
        memcpy(s->b->data + s->b->len, p, n);
    s->b->len += n;
    s->b->data[s->b->len] = '\0';
}

void bm_str_puts(bm_str_t *s, const char *z)
{
    bm_str_append(s, z, strlen(z));
}

void bm_str_putc(bm_str_t *s, char c)
{
    bm_str_append(s, &c, 1);
}

void bm_str_vprintf(bm_str_t *s, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap2);
    va_end(ap2);
    if (n < 0)
        return;
    if ((size_t)n < sizeof small) {
        bm_str_append(s, small, (size_t)n);
        return;
    }
    if (bm_str_reserve(s, (size_t)n + 1) != 0)
        return;
    vsnprintf(s->b->data + s->b->len, (size_t)n + 1, fmt, ap);
    s->b->len += (size_t)n;
}

void bm_str_printf(bm_str_t *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bm_str_vprintf(s, fmt, ap);
    va_end(ap);
}

void bm_str_json_string(bm_str_t *s, const char *z, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    if (bm_str_reserve(s, n + 2) != 0)
        return;
    bm_str_putc(s, '"');
    size_t run = 0; /* start of the current run of bytes that need no escaping */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)z[i];
        const char *esc = NULL;
        char u[6];
        switch (c) {
        case '"':
            esc = "\\\"";
            break;
        case '\\':
            esc = "\\\\";
            break;
        case '\n':
            esc = "\\n";
            break;
        case '\r':
            esc = "\\r";
            break;
        case '\t':
            esc = "\\t";
            break;
        default:
            if (c < 0x20) {
                u[0] = '\\';
                u[1] = 'u';
                u[2] = '0';
                u[3] = '0';
                u[4] = hex[c >> 4];
                u[5] = hex[c & 15];
            }
            break;
        }
        if (!esc && c >= 0x20)
            continue;
        bm_str_append(s, z + run, i - run);
        if (esc)
            bm_str_puts(s, esc);
        else
            bm_str_append(s, u, 6);
        run = i + 1;
    }
    bm_str_append(s, z + run, n - run);
    bm_str_putc(s, '"');
}

size_t bm_u64_dec(char *out, uint64_t v)
{
    char tmp[BM_U64_DEC_MAX];
    size_t i = sizeof tmp;
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    memcpy(out, tmp + i, sizeof tmp - i);
    return sizeof tmp - i;
}

void bm_str_u64(bm_str_t *s, uint64_t v)
{
    char tmp[BM_U64_DEC_MAX];
    bm_str_append(s, tmp, bm_u64_dec(tmp, v));
}

void bm_str_hex(bm_str_t *s, const void *p, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    if (bm_str_reserve(s, 2 + 2 * n) != 0)
        return;
    const unsigned char *b = p;
    char *out = s->b->data + s->b->len;
    *out++ = '0';
    *out++ = 'x';
    for (size_t i = 0; i < n; i++) {
        *out++ = hex[b[i] >> 4];
        *out++ = hex[b[i] & 15];
    }
    s->b->len += 2 + 2 * n;
    s->b->data[s->b->len] = '\0';
}

const char *bm_str_data(const bm_str_t *s)
{
    return s->b ? s->b->data : "";
}

size_t bm_str_len(const bm_str_t *s)
{
    return s->b ? s->b->len : 0;
}

void bm_str_clear(bm_str_t *s)
{
    if (s->b) {
        s->b->len = 0;
        s->b->data[0] = '\0';
    }
    s->oom = false;
}

bm_buf_t *bm_str_finish(bm_str_t *s)
{
    bm_buf_t *b = s->b;
    bool oom = s->oom;
    s->b = NULL;
    s->oom = false;
    if (oom) {
        free(b);
        return NULL;
    }
    if (!b)
        b = bm_buf_new(0);
    return b;
}

void bm_str_dispose(bm_str_t *s)
{
    free(s->b);
    s->b = NULL;
    s->oom = false;
}
