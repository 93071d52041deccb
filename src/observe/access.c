/* SPDX-License-Identifier: MIT */
/*
 * access: masking and formatting of access log lines (see access.h), written into fixed
 * buffers with a small bounded writer.
 */
#include "observe/access.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/log.h"

/* A bounded writer: appends until the buffer is full, always NUL-terminated. */
typedef struct w {
    char *p;
    size_t cap, len;
} w_t;

static void put(w_t *w, const char *s, size_t n)
{
    if (w->cap == 0)
        return;
    size_t room = w->cap - 1 - w->len;
    if (n > room)
        n = room;
    memcpy(w->p + w->len, s, n);
    w->len += n;
    w->p[w->len] = '\0';
}

static void puts_(w_t *w, const char *s)
{
    put(w, s, strlen(s));
}

static void printf_(w_t *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void printf_(w_t *w, const char *fmt, ...)
{
    char b[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    if (n > 0)
        put(w, b, (size_t)n < sizeof b ? (size_t)n : sizeof b - 1);
}

/* A JSON string literal of s[0..n). */
static void json_str(w_t *w, const char *s, size_t n)
{
    put(w, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            put(w, e, 2);
        } else if (c < 0x20) {
            printf_(w, "\\u%04x", c);
        } else {
            put(w, s + i, 1);
        }
    }
    put(w, "\"", 1);
}

/* ---- masking ------------------------------------------------------------------------------ */

static bool secret_name(const char *s, size_t n)
{
    static const char *const words[] = {"key",  "token",     "secret",     "password",
                                        "auth", "signature", "credential", "passwd"};
    for (size_t k = 0; k < sizeof words / sizeof words[0]; k++) {
        size_t wl = strlen(words[k]);
        for (size_t i = 0; i + wl <= n; i++)
            if (strncasecmp(s + i, words[k], wl) == 0)
                return true;
    }
    return false;
}

/* A segment that looks like a generated key (see access.h). */
static bool key_like(const char *s, size_t n)
{
    if (n < 20 || (n > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')))
        return false;
    bool letter = false, digit = false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (isalpha(c))
            letter = true;
        else if (isdigit(c))
            digit = true;
        else if (c != '-' && c != '_' && c != '.')
            return false;
    }
    return letter && digit;
}

size_t bm_access_mask_target(const char *target, char *out, size_t cap)
{
    w_t w = {out, cap, 0};
    if (cap)
        out[0] = '\0';
    const char *q = strchr(target, '?');
    size_t plen = q ? (size_t)(q - target) : strlen(target);
    bool after_secret = false;
    for (size_t i = 0; i < plen;) {
        if (target[i] == '/') {
            put(&w, "/", 1);
            i++;
            continue;
        }
        size_t j = i;
        while (j < plen && target[j] != '/')
            j++;
        bool mask = after_secret || key_like(target + i, j - i);
        if (mask)
            put(&w, "***", 3);
        else
            put(&w, target + i, j - i);
        after_secret = secret_name(target + i, j - i) && j - i <= 16;
        i = j;
    }
    if (!q)
        return w.len;
    put(&w, "?", 1);
    const char *p = q + 1;
    while (*p) {
        const char *amp = strchr(p, '&');
        size_t len = amp ? (size_t)(amp - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        size_t nl = eq ? (size_t)(eq - p) : len;
        put(&w, p, nl);
        if (eq) {
            put(&w, "=", 1);
            if (secret_name(p, nl))
                put(&w, "***", 3);
            else
                put(&w, eq + 1, len - nl - 1);
        }
        if (!amp)
            break;
        put(&w, "&", 1);
        p = amp + 1;
    }
    return w.len;
}

/* ---- lines -------------------------------------------------------------------------------- */

size_t bm_access_fields(const bm_req_summary_t *s, const char *const *ids, size_t n_ids, bool json,
                        char *out, size_t cap)
{
    char path[1024];
    size_t pl = bm_access_mask_target(s->target ? s->target : "", path, sizeof path);
    w_t w = {out, cap, 0};
    if (cap)
        out[0] = '\0';
    const char *cls = s->route_class ? s->route_class : "other";
    double ms = (double)s->duration_us / 1000.0;
    if (json) {
        puts_(&w, "\"client\":");
        json_str(&w, s->peer, strlen(s->peer));
        puts_(&w, ",\"method\":");
        json_str(&w, s->method, strlen(s->method));
        puts_(&w, ",\"path\":");
        json_str(&w, path, pl);
        printf_(&w, ",\"status\":%d,\"bytes\":%llu,\"duration_ms\":%.3f,\"class\":", s->status,
                (unsigned long long)s->body_bytes, ms);
        json_str(&w, cls, strlen(cls));
        puts_(&w, ",\"nodes\":[");
    } else {
        printf_(&w, "%s \"", s->peer);
        puts_(&w, s->method);
        put(&w, " ", 1);
        put(&w, path, pl);
        printf_(&w, "\" %d %llu %.3fms class=%s nodes=", s->status,
                (unsigned long long)s->body_bytes, ms, cls);
    }
    size_t listed = 0;
    for (int i = 0; i < 64; i++) {
        if (!(s->upstreams & ((uint64_t)1 << i)))
            continue;
        char num[16];
        snprintf(num, sizeof num, "#%d", i);
        const char *id = (size_t)i < n_ids ? ids[i] : num;
        if (listed++)
            put(&w, ",", 1);
        if (json)
            json_str(&w, id, strlen(id));
        else
            puts_(&w, id);
    }
    if (json)
        printf_(&w, "],\"cut\":%s", s->cut ? "true" : "false");
    else if (!listed)
        put(&w, "-", 1);
    if (!json && s->cut)
        puts_(&w, " cut");
    return w.len;
}

void bm_access_log(const bm_req_summary_t *s, const char *const *ids, size_t n_ids)
{
    char line[2048];
    bm_access_fields(s, ids, n_ids, bm_log_get_format() == BM_LOG_JSON, line, sizeof line);
    bm_log_record("access", line);
}
