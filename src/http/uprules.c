/* SPDX-License-Identifier: MIT */
/*
 * uprules: the request and response rules both upstream transports share (see uprules.h).
 * Nothing here does I/O or keeps state; the transports call these on their hot paths, so
 * the field filter decides each field with one pass over its name.
 */
#include "http/uprules.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>

#include "base/buf.h"
#include "base/err.h"
#include "base/url.h"

bool bm_uprules_parse_url(const char *url, bm_uprules_url_t *out)
{
    size_t s;
    memset(out, 0, sizeof *out);
    if (strncasecmp(url, "http://", 7) == 0) {
        s = 7;
    } else if (strncasecmp(url, "https://", 8) == 0) {
        s = 8;
        out->https = true;
    } else {
        return false;
    }
    if (!bm_url_printable(url, strlen(url)))
        return false;
    const char *auth = url + s;
    size_t alen = strcspn(auth, "/?#");
    const char *at = memrchr(auth, '@', alen);
    const char *host = at ? at + 1 : auth;
    if (at) {
        out->userinfo = auth;
        out->userinfo_len = (size_t)(at - auth);
    }
    out->hostport = host;
    out->hostport_len = (size_t)(auth + alen - host);
    out->origin_len = s + alen;
    out->target = auth + alen;
    return out->hostport_len > 0 && *host != ':';
}

/* tchar (RFC 9110 5.6.2) */
static bool is_tchar(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return true;
    if (c == '-')
        return true; /* the usual one in field names */
    return c != 0 && strchr("!#$%&'*+.^_`|~", c) != NULL;
}

bool bm_uprules_token(const char *p, size_t n)
{
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!is_tchar((unsigned char)p[i]))
            return false;
    return true;
}

bool bm_uprules_value(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] == '\r' || p[i] == '\n' || p[i] == '\0')
            return false;
    return true;
}

/* True when `name` is listed in any Connection field of `h`. */
static bool connection_listed(const bm_hdrs_t *h, const char *name, size_t len)
{
    for (size_t i = 0; i < h->n; i++)
        if (bm_header_name_is(h->items[i].name, h->items[i].name_len, "connection") &&
            bm_header_listed_in_connection(h->items[i].value, name, len))
            return true;
    return false;
}

bool bm_uprules_is_forwarding(const char *name, size_t len)
{
    return bm_header_name_is(name, len, "x-forwarded-for") ||
           bm_header_name_is(name, len, "forwarded") || bm_header_name_is(name, len, "x-real-ip");
}

/* True when `node` has a field named name[0..len). */
static bool named_in(const bm_hdrs_t *node, const char *name, size_t len)
{
    for (size_t i = 0; node && i < node->n; i++)
        if (node->items[i].name_len == len && strncasecmp(node->items[i].name, name, len) == 0)
            return true;
    return false;
}

/* The fields of `h` that go upstream; `caller`: h is the client's, and `node`'s fields and
 * the forwarding fields leave theirs out. */
static int pass_fields(const bm_hdrs_t *h, bool caller, const bm_hdrs_t *node, bool drop_auth,
                       bm_uprules_emit_fn emit, void *ctx, unsigned *saw)
{
    if (!h)
        return 0;
    /* Only a request that carries a Connection field pays for the per-field lookup. */
    bool has_conn = false;
    for (size_t i = 0; i < h->n && !has_conn; i++)
        has_conn = bm_header_name_is(h->items[i].name, h->items[i].name_len, "connection");
    for (size_t i = 0; i < h->n; i++) {
        const bm_header_t *f = &h->items[i];
        if (!bm_uprules_token(f->name, f->name_len) || !bm_uprules_value(f->value, f->value_len))
            return BM_EINVAL;
        if (bm_header_is_hop_by_hop(f->name, f->name_len) ||
            bm_header_name_is(f->name, f->name_len, "accept-encoding") ||
            (has_conn && connection_listed(h, f->name, f->name_len)) ||
            (drop_auth && bm_header_name_is(f->name, f->name_len, "authorization")) ||
            (caller && (bm_uprules_is_forwarding(f->name, f->name_len) ||
                        named_in(node, f->name, f->name_len))))
            continue;
        if (bm_header_name_is(f->name, f->name_len, "content-type"))
            *saw |= BM_UPRULES_SAW_CONTENT_TYPE;
        else if (bm_header_name_is(f->name, f->name_len, "accept"))
            *saw |= BM_UPRULES_SAW_ACCEPT;
        emit(ctx, f->name, f->name_len, f->value, f->value_len);
    }
    return 0;
}

int bm_uprules_fields(const bm_hdrs_t *h, bool drop_auth, bm_uprules_emit_fn emit, void *ctx,
                      unsigned *saw)
{
    return pass_fields(h, false, NULL, drop_auth, emit, ctx, saw);
}

int bm_uprules_caller_fields(const bm_hdrs_t *h, const bm_hdrs_t *node, bool drop_auth,
                             bm_uprules_emit_fn emit, void *ctx, unsigned *saw)
{
    return pass_fields(h, true, node, drop_auth, emit, ctx, saw);
}

size_t bm_uprules_fields_bytes(const bm_hdrs_t *h)
{
    size_t n = 0;
    for (size_t i = 0; h && i < h->n; i++)
        n += h->items[i].name_len + h->items[i].value_len + 4;
    return n;
}

bool bm_uprules_interim_skipped(int status)
{
    return status == 100 || status == 102 || status == 103;
}

int bm_uprules_content_length(const bm_hdrs_t *h, int64_t *len, const char **why)
{
    *len = -1;
    bool chunked = false;
    for (size_t i = 0; i < h->n; i++) {
        const bm_header_t *f = &h->items[i];
        if (bm_header_name_is(f->name, f->name_len, "transfer-encoding")) {
            chunked = true;
            continue;
        }
        if (!bm_header_name_is(f->name, f->name_len, "content-length"))
            continue;
        if (*len >= 0) {
            *why = "Content-Length repeated";
            return BM_EPROTO;
        }
        uint64_t v = 0;
        if (f->value_len == 0 || f->value_len > 19) {
            *why = "invalid Content-Length";
            return BM_EPROTO;
        }
        for (size_t k = 0; k < f->value_len; k++) {
            unsigned char c = (unsigned char)f->value[k];
            if (c < '0' || c > '9') {
                *why = "invalid Content-Length";
                return BM_EPROTO;
            }
            v = v * 10 + (uint64_t)(c - '0'); /* 19 digits cannot wrap a uint64_t */
        }
        if (v > (uint64_t)INT64_MAX) {
            *why = "invalid Content-Length";
            return BM_EPROTO;
        }
        *len = (int64_t)v;
    }
    if (chunked && *len >= 0) {
        *why = "Content-Length next to Transfer-Encoding";
        return BM_EPROTO;
    }
    return 0;
}

char *bm_uprules_secret(const char *userinfo, size_t len, bool *oom)
{
    *oom = false;
    if (!userinfo || len == 0)
        return NULL;
    const char *colon = memchr(userinfo, ':', len);
    const char *s = colon ? colon + 1 : userinfo;
    size_t slen = colon ? len - (size_t)(colon + 1 - userinfo) : len;
    if (slen == 0)
        return NULL;
    char *secret = strndup(s, slen);
    *oom = secret == NULL;
    return secret;
}

void bm_uprules_mask(char *out, size_t cap, const char *in, const char *secret)
{
    size_t slen = secret ? strlen(secret) : 0, o = 0;
    while (*in && o + 1 < cap) {
        if (slen && strncmp(in, secret, slen) == 0) {
            for (const char *m = "***"; *m && o + 1 < cap; m++)
                out[o++] = *m;
            in += slen;
            continue;
        }
        out[o++] = *in++;
    }
    while (o && (out[o - 1] == '\n' || out[o - 1] == '\r'))
        o--;
    out[o] = '\0';
}

void bm_uprules_log_failure(bm_log_limit_t *lim, const char *method, const char *url, int err,
                            const char *detail)
{
    if (!bm_log_enabled(BM_LOG_DEBUG))
        return;
    bm_str_t masked = BM_STR_INIT;
    bm_url_mask(&masked, url ? url : "");
    bm_log_limited(lim, BM_LOG_DEBUG, "upstream: %s %s failed: %s (%s)", method,
                   bm_str_data(&masked), bm_strerror(err), detail);
    bm_str_dispose(&masked);
}

bool bm_uprules_socket_has_input(int fd)
{
    int n = 0;
    return fd >= 0 && ioctl(fd, FIONREAD, &n) == 0 && n > 0;
}
