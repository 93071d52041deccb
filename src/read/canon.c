/* SPDX-License-Identifier: MIT */
/*
 * canon: a recursive-descent reader that writes the canonical form as it goes (see
 * canon.h). Objects are the one place that needs memory of its own: each member is written
 * to its own string, and the members are sorted by key before they are joined.
 */
#include "read/canon.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/json.h"

typedef struct reader {
    const char *p, *end;
    int depth;
} reader_t;

static int value(reader_t *r, bm_str_t *out);

static void skip_ws(reader_t *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
        r->p++;
}

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static void put_utf8(bm_str_t *s, uint32_t cp)
{
    char b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (char)(0xC0 | (cp >> 6));
        b[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = (char)(0xE0 | (cp >> 12));
        b[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        b[0] = (char)(0xF0 | (cp >> 18));
        b[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        b[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        b[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    bm_str_append(s, b, n);
}

static int hex4(reader_t *r, uint32_t *cp)
{
    if (r->end - r->p < 4)
        return BM_EINVAL;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        int h = bm_hexval(r->p[i]);
        if (h < 0)
            return BM_EINVAL;
        v = v << 4 | (uint32_t)h;
    }
    r->p += 4;
    *cp = v;
    return 0;
}

/* One escape after the backslash, decoded into raw. */
static int escape(reader_t *r, bm_str_t *raw)
{
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    if (r->p >= r->end)
        return BM_EINVAL;
    char c = *r->p++;
    const char *k = memchr(from, c, sizeof from - 1);
    if (k) {
        bm_str_putc(raw, to[k - from]);
        return 0;
    }
    if (c != 'u')
        return BM_EINVAL;
    uint32_t cp, lo;
    if (hex4(r, &cp) != 0)
        return BM_EINVAL;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (r->end - r->p < 6 || r->p[0] != '\\' || r->p[1] != 'u')
            return BM_EINVAL;
        r->p += 2;
        if (hex4(r, &lo) != 0 || lo < 0xDC00 || lo > 0xDFFF)
            return BM_EINVAL;
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
        return BM_EINVAL;
    }
    put_utf8(raw, cp);
    return 0;
}

/* A string's value, unescaped, into raw (the opening quote is at r->p). */
static int string_raw(reader_t *r, bm_str_t *raw)
{
    r->p++;
    while (r->p < r->end) {
        unsigned char c = (unsigned char)*r->p;
        if (c == '"') {
            r->p++;
            return 0;
        }
        if (c < 0x20)
            return BM_EINVAL;
        if (c == '\\') {
            r->p++;
            if (escape(r, raw) != 0)
                return BM_EINVAL;
            continue;
        }
        size_t run = 1;
        while (r->p + run < r->end && r->p[run] != '"' && r->p[run] != '\\' &&
               (unsigned char)r->p[run] >= 0x20)
            run++;
        bm_str_append(raw, r->p, run);
        r->p += run;
    }
    return BM_EINVAL;
}

static bool is_hex_string(const char *s, size_t n)
{
    if (n < 2 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X'))
        return false;
    for (size_t i = 2; i < n; i++)
        if (bm_hexval(s[i]) < 0)
            return false;
    return true;
}

/* Writes raw[0..n) as a canonical JSON string. */
static void put_string(bm_str_t *out, const char *s, size_t n)
{
    bool hex = is_hex_string(s, n);
    bm_str_putc(out, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            bm_str_putc(out, '\\');
            bm_str_putc(out, (char)c);
        } else if (c < 0x20) {
            bm_str_printf(out, "\\u%04x", c);
        } else {
            bm_str_putc(out, hex && c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : (char)c);
        }
    }
    bm_str_putc(out, '"');
}

static int string(reader_t *r, bm_str_t *out)
{
    bm_str_t raw = BM_STR_INIT;
    int rc = string_raw(r, &raw);
    if (rc == 0)
        put_string(out, bm_str_data(&raw), bm_str_len(&raw));
    bm_str_dispose(&raw);
    return rc;
}

/*
 * A number as its exact decimal value: "-" when negative and not zero, the significant
 * digits without leading or trailing zeros, and "e<exp>" when the exponent is not 0.
 */
static int number(reader_t *r, bm_str_t *out)
{
    bool neg = false;
    char digits[512];
    size_t nd = 0;
    int64_t exp = 0;
    if (r->p < r->end && *r->p == '-') {
        neg = true;
        r->p++;
    }
    if (r->p >= r->end || !is_digit(*r->p))
        return BM_EINVAL;
    if (*r->p == '0' && r->p + 1 < r->end && is_digit(r->p[1]))
        return BM_EINVAL; /* a leading zero */
    for (; r->p < r->end && is_digit(*r->p); r->p++)
        if (nd || *r->p != '0') {
            if (nd == sizeof digits)
                return BM_EINVAL;
            digits[nd++] = *r->p;
        }
    if (r->p < r->end && *r->p == '.') {
        r->p++;
        if (r->p >= r->end || !is_digit(*r->p))
            return BM_EINVAL;
        for (; r->p < r->end && is_digit(*r->p); r->p++) {
            if (nd || *r->p != '0') {
                if (nd == sizeof digits)
                    return BM_EINVAL;
                digits[nd++] = *r->p;
            }
            exp--;
        }
    }
    if (r->p < r->end && (*r->p == 'e' || *r->p == 'E')) {
        r->p++;
        bool eneg = false;
        int64_t e = 0;
        if (r->p < r->end && (*r->p == '+' || *r->p == '-'))
            eneg = *r->p++ == '-';
        if (r->p >= r->end || !is_digit(*r->p))
            return BM_EINVAL;
        for (; r->p < r->end && is_digit(*r->p); r->p++)
            if (e < 100000000)
                e = e * 10 + (*r->p - '0');
        exp += eneg ? -e : e;
    }
    while (nd && digits[nd - 1] == '0') {
        nd--;
        exp++;
    }
    if (nd == 0) {
        bm_str_putc(out, '0');
        return 0;
    }
    if (neg)
        bm_str_putc(out, '-');
    bm_str_append(out, digits, nd);
    if (exp)
        bm_str_printf(out, "e%lld", (long long)exp);
    return 0;
}

static int literal(reader_t *r, bm_str_t *out, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n) != 0)
        return BM_EINVAL;
    r->p += n;
    bm_str_puts(out, word);
    return 0;
}

static int array(reader_t *r, bm_str_t *out)
{
    r->p++;
    bm_str_putc(out, '[');
    skip_ws(r);
    if (r->p < r->end && *r->p == ']') {
        r->p++;
        bm_str_putc(out, ']');
        return 0;
    }
    for (bool first = true;; first = false) {
        if (!first)
            bm_str_putc(out, ',');
        int rc = value(r, out);
        if (rc)
            return rc;
        skip_ws(r);
        if (r->p >= r->end)
            return BM_EINVAL;
        if (*r->p == ']') {
            r->p++;
            bm_str_putc(out, ']');
            return 0;
        }
        if (*r->p++ != ',')
            return BM_EINVAL;
    }
}

typedef struct member {
    bm_str_t key;  /* unescaped */
    bm_str_t text; /* canonical "key":value */
} member_t;

static int member_cmp(const void *a, const void *b)
{
    const member_t *x = a, *y = b;
    size_t lx = bm_str_len(&x->key), ly = bm_str_len(&y->key);
    int c = memcmp(bm_str_data(&x->key), bm_str_data(&y->key), lx < ly ? lx : ly);
    return c ? c : (lx > ly) - (lx < ly);
}

static int read_members(reader_t *r, member_t **ms, size_t *n)
{
    size_t cap = 0;
    for (;;) {
        skip_ws(r);
        if (r->p >= r->end || *r->p != '"')
            return BM_EINVAL;
        member_t *g = bm_grow(*ms, *n, &cap, sizeof *g, 8);
        if (!g)
            return BM_ENOMEM;
        *ms = g;
        member_t *m = &(*ms)[(*n)++];
        m->key = (bm_str_t)BM_STR_INIT;
        m->text = (bm_str_t)BM_STR_INIT;
        if (string_raw(r, &m->key) != 0)
            return BM_EINVAL;
        /* A hex key is written in lower case, so it is sorted in lower case too: sorted as
         * read, "0X" < "0Xr" < "0xrr" came out "0x","0Xr","0xrr", an order that sorts
         * differently when read again (found by fuzz_canon). */
        if (m->key.b && is_hex_string(m->key.b->data, m->key.b->len)) {
            for (size_t i = 0; i < m->key.b->len; i++)
                if (m->key.b->data[i] >= 'A' && m->key.b->data[i] <= 'Z')
                    m->key.b->data[i] = (char)(m->key.b->data[i] - 'A' + 'a');
        }
        put_string(&m->text, bm_str_data(&m->key), bm_str_len(&m->key));
        bm_str_putc(&m->text, ':');
        skip_ws(r);
        if (r->p >= r->end || *r->p++ != ':')
            return BM_EINVAL;
        int rc = value(r, &m->text);
        if (rc)
            return rc;
        if (m->key.oom || m->text.oom)
            return BM_ENOMEM;
        skip_ws(r);
        if (r->p >= r->end)
            return BM_EINVAL;
        if (*r->p == '}') {
            r->p++;
            return 0;
        }
        if (*r->p++ != ',')
            return BM_EINVAL;
    }
}

static int object(reader_t *r, bm_str_t *out)
{
    member_t *ms = NULL;
    size_t n = 0;
    int rc = 0;
    r->p++;
    skip_ws(r);
    if (r->p < r->end && *r->p == '}')
        r->p++;
    else
        rc = read_members(r, &ms, &n);
    if (rc == 0) {
        if (n > 1)
            qsort(ms, n, sizeof *ms, member_cmp);
        bm_str_putc(out, '{');
        for (size_t i = 0; i < n; i++) {
            if (i)
                bm_str_putc(out, ',');
            bm_str_append(out, bm_str_data(&ms[i].text), bm_str_len(&ms[i].text));
        }
        bm_str_putc(out, '}');
    }
    for (size_t i = 0; i < n; i++) {
        bm_str_dispose(&ms[i].key);
        bm_str_dispose(&ms[i].text);
    }
    free(ms);
    return rc;
}

static int value(reader_t *r, bm_str_t *out)
{
    int rc;
    skip_ws(r);
    if (r->p >= r->end)
        return BM_EINVAL;
    switch (*r->p) {
    case '{':
    case '[':
        if (++r->depth > BM_CANON_MAX_DEPTH)
            return BM_EINVAL;
        rc = *r->p == '{' ? object(r, out) : array(r, out);
        r->depth--;
        return rc;
    case '"':
        return string(r, out);
    case 't':
        return literal(r, out, "true");
    case 'f':
        return literal(r, out, "false");
    case 'n':
        return literal(r, out, "null");
    default:
        return number(r, out);
    }
}

int bm_canon_json(const char *p, size_t n, bm_str_t *out)
{
    reader_t r = {p, p + n, 0};
    int rc = value(&r, out);
    if (rc)
        return rc;
    skip_ws(&r);
    if (r.p != r.end)
        return BM_EINVAL;
    return out->oom ? BM_ENOMEM : 0;
}

bool bm_canon_equal(const char *a, size_t alen, const char *b, size_t blen, bool ssz)
{
    if (alen == blen && (alen == 0 || memcmp(a, b, alen) == 0))
        return true;
    if (ssz)
        return false;
    bm_str_t ca = BM_STR_INIT, cb = BM_STR_INIT;
    bool eq = bm_canon_json(a, alen, &ca) == 0 && bm_canon_json(b, blen, &cb) == 0 &&
              bm_str_len(&ca) == bm_str_len(&cb) &&
              memcmp(bm_str_data(&ca), bm_str_data(&cb), bm_str_len(&ca)) == 0;
    bm_str_dispose(&ca);
    bm_str_dispose(&cb);
    return eq;
}
