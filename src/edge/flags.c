/* SPDX-License-Identifier: MIT */
/*
 * flags: a walk over the top level of a JSON object that skips each value by its brackets
 * and strings (escapes honoured), looking only at the member names.
 */
#include "edge/flags.h"

#include <string.h>

static size_t skip_ws(const char *p, size_t n, size_t i)
{
    while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r' || p[i] == '\n'))
        i++;
    return i;
}

/* Past the string starting at p[i] == '"'; n when unterminated. */
static size_t skip_string(const char *p, size_t n, size_t i)
{
    for (i++; i < n; i++) {
        if (p[i] == '\\')
            i++;
        else if (p[i] == '"')
            return i + 1;
    }
    return n;
}

/* Past the value starting at p[i]; n when malformed. */
static size_t skip_value(const char *p, size_t n, size_t i)
{
    if (i >= n)
        return n;
    if (p[i] == '"')
        return skip_string(p, n, i);
    if (p[i] == '{' || p[i] == '[') {
        int depth = 0;
        while (i < n) {
            char c = p[i];
            if (c == '"') {
                i = skip_string(p, n, i);
                continue;
            }
            if (c == '{' || c == '[')
                depth++;
            else if (c == '}' || c == ']') {
                if (--depth == 0)
                    return i + 1;
            }
            i++;
        }
        return n;
    }
    while (i < n && p[i] != ',' && p[i] != '}' && p[i] != ' ' && p[i] != '\n' && p[i] != '\t' &&
           p[i] != '\r')
        i++;
    return i;
}

static void note(const char *p, size_t n, size_t v, long *off, bool *val)
{
    if (v + 4 <= n && memcmp(p + v, "true", 4) == 0) {
        *off = (long)v;
        *val = true;
    } else if (v + 5 <= n && memcmp(p + v, "false", 5) == 0) {
        *off = (long)v;
        *val = false;
    }
}

bool bm_flags_scan(const char *p, size_t n, bm_flags_t *out)
{
    out->finalized_off = out->optimistic_off = -1;
    out->finalized = out->optimistic = false;
    size_t i = skip_ws(p, n, 0);
    if (i >= n || p[i] != '{')
        return false;
    i++;
    for (;;) {
        i = skip_ws(p, n, i);
        if (i >= n)
            return false;
        if (p[i] == '}')
            return true;
        if (p[i] != '"')
            return false;
        size_t name = i + 1;
        size_t end = skip_string(p, n, i);
        if (end >= n)
            return false;
        size_t name_len = end - 1 - name;
        i = skip_ws(p, n, end);
        if (i >= n || p[i] != ':')
            return false;
        size_t v = skip_ws(p, n, i + 1);
        if (name_len == 9 && memcmp(p + name, "finalized", 9) == 0)
            note(p, n, v, &out->finalized_off, &out->finalized);
        else if (name_len == 20 && memcmp(p + name, "execution_optimistic", 20) == 0)
            note(p, n, v, &out->optimistic_off, &out->optimistic);
        i = skip_ws(p, n, skip_value(p, n, v));
        if (i < n && p[i] == ',')
            i++;
        else if (i < n && p[i] == '}')
            return true;
        else
            return false;
    }
}

/* One flag's new value at its offset. */
typedef struct edit {
    long off;
    bool old, now;
} edit_t;

/* Appends the literal for b. */
static void put_bool(bm_str_t *s, bool b)
{
    bm_str_puts(s, b ? "true" : "false");
}

bm_buf_t *bm_flags_patch(const char *p, size_t n, const bm_flags_t *f, int fin, int opt)
{
    bool ch_fin = fin >= 0 && f->finalized_off >= 0 && f->finalized != (fin != 0);
    bool ch_opt = opt >= 0 && f->optimistic_off >= 0 && f->optimistic != (opt != 0);
    if (!ch_fin && !ch_opt)
        return NULL;
    /* the two edits in body order */
    edit_t e[2];
    int ne = 0;
    if (ch_fin)
        e[ne++] = (edit_t){f->finalized_off, f->finalized, fin != 0};
    if (ch_opt)
        e[ne++] = (edit_t){f->optimistic_off, f->optimistic, opt != 0};
    if (ne == 2 && e[1].off < e[0].off) {
        edit_t t = e[0];
        e[0] = e[1];
        e[1] = t;
    }
    bm_str_t s = BM_STR_INIT;
    bm_str_reserve(&s, n + 2);
    size_t at = 0;
    for (int i = 0; i < ne; i++) {
        bm_str_append(&s, p + at, (size_t)e[i].off - at);
        put_bool(&s, e[i].now);
        at = (size_t)e[i].off + (e[i].old ? 4 : 5);
    }
    bm_str_append(&s, p + at, n - at);
    if (s.oom) {
        bm_str_dispose(&s);
        return NULL;
    }
    return bm_str_finish(&s);
}
