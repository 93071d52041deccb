/* SPDX-License-Identifier: MIT */
/*
 * h1req: request heads for the native upstream client (see h1req.h). The per-request part
 * is written into a builder the transfer keeps from request to request, reserved once for
 * the worst case, so building a head costs no allocation once warm and no printf.
 */
#include "http/h1req.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/json.h"
#include "base/log.h"

#define LIT(s) s, sizeof(s) - 1

/* Appends p[0..n) with %XX escapes decoded (a malformed escape stays as written). */
static void append_decoded(bm_str_t *s, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int hi, lo;
        if (p[i] == '%' && i + 2 < n && (hi = bm_hexval(p[i + 1])) >= 0 &&
            (lo = bm_hexval(p[i + 2])) >= 0) {
            bm_str_putc(s, (char)(hi * 16 + lo));
            i += 2;
        } else {
            bm_str_putc(s, p[i]);
        }
    }
}

static void append_base64(bm_str_t *s, const unsigned char *p, size_t n)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n)
            v |= p[i + 2];
        bm_str_putc(s, tab[(v >> 18) & 63]);
        bm_str_putc(s, tab[(v >> 12) & 63]);
        bm_str_putc(s, i + 1 < n ? tab[(v >> 6) & 63] : '=');
        bm_str_putc(s, i + 2 < n ? tab[v & 63] : '=');
    }
}

/* "Authorization: Basic base64(user:password)\r\n" from the URL's user info, each part
 * percent-decoded; a lone user name gets an empty password. */
static void append_auth(bm_str_t *s, const char *ui, size_t len)
{
    const char *colon = memchr(ui, ':', len);
    size_t ulen = colon ? (size_t)(colon - ui) : len;
    bm_str_t plain = BM_STR_INIT;
    append_decoded(&plain, ui, ulen);
    bm_str_putc(&plain, ':');
    if (colon)
        append_decoded(&plain, colon + 1, len - ulen - 1);
    bm_str_append(s, LIT("Authorization: Basic "));
    append_base64(s, (const unsigned char *)bm_str_data(&plain), bm_str_len(&plain));
    bm_str_append(s, LIT("\r\n"));
    s->oom |= plain.oom;
    bm_str_dispose(&plain);
}

int bm_h1req_origin(bm_h1req_origin_t *o, const bm_uprules_url_t *u)
{
    const char *hp = u->hostport, *end = u->hostport + u->hostport_len;
    const char *host = hp, *host_end, *port = NULL;
    if (*hp == '[') {
        const char *close = memchr(hp, ']', u->hostport_len);
        if (!close)
            return BM_EINVAL;
        host = hp + 1;
        host_end = close;
        if (close + 1 < end) {
            if (close[1] != ':')
                return BM_EINVAL;
            port = close + 2;
        }
        o->ipv6 = true;
    } else {
        host_end = memchr(hp, ':', u->hostport_len);
        if (host_end)
            port = host_end + 1;
        else
            host_end = end;
    }
    size_t hlen = (size_t)(host_end - host);
    if (hlen == 0 || hlen >= sizeof o->host)
        return BM_EINVAL;
    memcpy(o->host, host, hlen);
    o->host[hlen] = '\0';
    unsigned long pv = 80;
    if (port && port < end) {
        pv = 0;
        for (const char *p = port; p < end; p++) {
            if (*p < '0' || *p > '9' || pv > 65535)
                return BM_EINVAL;
            pv = pv * 10 + (unsigned long)(*p - '0');
        }
        if (pv == 0 || pv > 65535)
            return BM_EINVAL;
    }
    snprintf(o->port, sizeof o->port, "%lu", pv);

    /* Host as libcurl writes it: the host as given, and the port unless it is 80. */
    bm_str_clear(&o->fixed);
    bm_str_append(&o->fixed, LIT("Host: "));
    bm_str_append(&o->fixed, hp, (size_t)(o->ipv6 ? host_end + 1 - hp : host_end - hp));
    if (pv != 80) {
        bm_str_putc(&o->fixed, ':');
        bm_str_puts(&o->fixed, o->port);
    }
    bm_str_append(&o->fixed, LIT("\r\n"));
    o->has_auth = u->userinfo != NULL;
    if (o->has_auth)
        append_auth(&o->fixed, u->userinfo, u->userinfo_len);
    return o->fixed.oom ? BM_ENOMEM : 0;
}

void bm_h1req_origin_dispose(bm_h1req_origin_t *o)
{
    bm_str_dispose(&o->fixed);
}

/* True when the path has a "." or ".." segment. */
static bool has_dot_segment(const char *p, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++) {
        if (p[i] != '/' || p[i + 1] != '.')
            continue;
        size_t k = i + 2;
        if (k < n && p[k] == '.')
            k++;
        if (k == n || p[k] == '/')
            return true;
    }
    return false;
}

static char *put(char *w, const void *p, size_t n)
{
    memcpy(w, p, n);
    return w + n;
}

#define PUT_LIT(w, s) put((w), s, sizeof(s) - 1)

/* Writes the path p[0..n) (starting with '/') with dot segments removed (RFC 3986
 * 5.2.4); never more than n bytes. */
static char *put_without_dots(char *o, const char *p, size_t n)
{
    char *start = o;
    const char *seg = p + 1, *end = p + n;
    for (;;) {
        const char *slash = memchr(seg, '/', (size_t)(end - seg));
        const char *seg_end = slash ? slash : end;
        size_t slen = (size_t)(seg_end - seg);
        bool last = slash == NULL;
        if (slen == 1 && seg[0] == '.') {
            if (last)
                *o++ = '/';
        } else if (slen == 2 && seg[0] == '.' && seg[1] == '.') {
            while (o > start && *--o != '/')
                ;
            if (last)
                *o++ = '/';
        } else {
            *o++ = '/';
            o = put(o, seg, slen);
        }
        if (last)
            break;
        seg = slash + 1;
    }
    if (o == start)
        *o++ = '/';
    return o;
}

/* Writes the request target made from the URL's part after the origin: at most
 * strlen(t) + 1 bytes. */
static char *put_target(char *w, const char *t)
{
    size_t tlen = strcspn(t, "#");
    const char *q = memchr(t, '?', tlen);
    size_t plen = q ? (size_t)(q - t) : tlen;
    if (plen == 0)
        *w++ = '/';
    else if (memchr(t, '.', plen) && has_dot_segment(t, plen))
        w = put_without_dots(w, t, plen);
    else
        w = put(w, t, plen);
    if (q)
        w = put(w, q, tlen - plen);
    return w;
}

/* bm_uprules_fields' emitter: "Name: value\r\n" at the cursor. */
static void emit_field(void *ctx, const char *name, size_t nlen, const char *value, size_t vlen)
{
    char **w = ctx;
    *w = put(*w, name, nlen);
    *w = PUT_LIT(*w, ": ");
    *w = put(*w, value, vlen);
    *w = PUT_LIT(*w, "\r\n");
}

int bm_h1req_build(bm_str_t *out, size_t *line_len, const char *method, const char *target,
                   const bm_xfer_req_t *req, bool drop_auth, bool has_body, size_t body_len)
{
    static const char tail[] = "Accept: */*\r\nAccept-Encoding: identity\r\n"
                               "Content-Length: 18446744073709551615\r\n\r\n";
    bm_str_clear(out);
    /* One reservation for the worst case; then the head is written in place. */
    size_t mlen = strlen(method);
    size_t need = mlen + strlen(target) + 16 + bm_uprules_fields_bytes(req->headers) +
                  bm_uprules_fields_bytes(req->extra) + sizeof tail +
                  (req->forwarded_for ? strlen(req->forwarded_for) + 24 : 0);
    if (bm_str_reserve(out, need) != 0)
        return BM_ENOMEM;
    char *start = out->b->data, *w = start;
    w = put(w, method, mlen);
    *w++ = ' ';
    w = put_target(w, target);
    w = PUT_LIT(w, " HTTP/1.1\r\n");
    *line_len = (size_t)(w - start);

    unsigned saw = 0;
    int rc = bm_uprules_caller_fields(req->headers, req->extra, drop_auth, emit_field, &w, &saw);
    if (!rc)
        rc = bm_uprules_fields(req->extra, false, emit_field, &w, &saw);
    if (!rc && req->forwarded_for) {
        size_t n = strlen(req->forwarded_for);
        if (!bm_uprules_value(req->forwarded_for, n))
            return BM_EINVAL;
        emit_field(&w, "X-Forwarded-For", 15, req->forwarded_for, n);
    }
    if (rc)
        return rc;
    if (!(saw & BM_UPRULES_SAW_ACCEPT))
        w = PUT_LIT(w, "Accept: */*\r\n");
    w = PUT_LIT(w, "Accept-Encoding: identity\r\n");
    out->b->len = (size_t)(w - start);
    if (has_body) { /* within the room reserved above: nothing moves */
        bm_str_append(out, LIT("Content-Length: "));
        bm_str_u64(out, body_len);
        bm_str_append(out, LIT("\r\n"));
    }
    bm_str_append(out, LIT("\r\n"));
    bm_assert(out->b->len <= need);
    return 0;
}
