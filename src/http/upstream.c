/* SPDX-License-Identifier: MIT */
/*
 * upstream: the dispatcher in front of the two transports. A request to an http:// URL
 * goes to the native HTTP/1.1 client (h1client.c), one to an https:// URL to libcurl
 * (upstream_curl.c). What a caller may send is checked here once (the URL's shape, the
 * method, the callbacks); each transport applies the same rules to header fields and
 * responses (uprules.c), so callers see one client.
 *
 * libcurl is only set up when the first https:// request comes (or at once with
 * http_via_curl): a beaconmux with plain-http nodes never initialises it. Each transport
 * keeps its own re-entrancy rules; calls that cross them (an h1 callback cancelling a
 * libcurl transfer) are ordinary calls from outside for the other one. After
 * bm_upstream_free the dispatcher's memory stays until both transports report that their
 * handles have closed.
 */
#include "http/upstream.h"

#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/defaults.h"
#include "base/err.h"
#include "base/log.h"
#include "http/h1client.h"
#include "http/upstream_curl.h"
#include "http/upstream_impl.h"
#include "http/uprules.h"

#define DEFAULT_MAX_CONNECTS 256

struct bm_upstream {
    uv_loop_t *loop;
    bm_upstream_opts_t opts;
    char *ca_file;
    bm_h1client_t *h1;
    bm_upcurl_t *curl; /* created on the first request that needs it */
    bool curl_failed;  /* creating it failed once: not tried again */
    bool dying;
    int open; /* transports not yet closed after bm_upstream_free */
    bm_log_limit_t refuse_log;
};

void bm_upstream_opts_default(bm_upstream_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->max_connects = DEFAULT_MAX_CONNECTS;
    o->max_host_connections = 0;
    o->tls_verify = BM_DEFAULT_TLS_VERIFY;
    o->ca_file = NULL;
    o->node_max_connections = BM_DEFAULT_UPSTREAM_MAX_CONNECTIONS;
    o->http_via_curl = false;
}

static void on_transport_closed(void *ud)
{
    bm_upstream_t *up = ud;
    if (--up->open > 0)
        return;
    free(up->ca_file);
    free(up);
}

static bm_upcurl_t *curl_transport(bm_upstream_t *up)
{
    if (!up->curl && !up->curl_failed) {
        up->curl = bm_upcurl_new(up->loop, &up->opts, on_transport_closed, up);
        up->curl_failed = up->curl == NULL;
    }
    return up->curl;
}

bm_upstream_t *bm_upstream_new(uv_loop_t *loop, const bm_upstream_opts_t *opts)
{
    bm_upstream_t *up = calloc(1, sizeof *up);
    if (!up) {
        bm_log(BM_LOG_ERROR, "upstream: out of memory");
        return NULL;
    }
    if (opts)
        up->opts = *opts;
    else
        bm_upstream_opts_default(&up->opts);
    if (!up->opts.max_connects)
        up->opts.max_connects = DEFAULT_MAX_CONNECTS;
    if (up->opts.ca_file && !(up->ca_file = strdup(up->opts.ca_file))) {
        free(up);
        bm_log(BM_LOG_ERROR, "upstream: out of memory");
        return NULL;
    }
    up->opts.ca_file = up->ca_file;
    up->loop = loop;
    bm_h1client_opts_t ho = {.max_connections = up->opts.node_max_connections,
                             .idle_close_ms = up->opts.node_idle_close_ms,
                             .max_requests = up->opts.node_max_requests};
    up->h1 = bm_h1client_new(loop, &ho, on_transport_closed, up);
    if (!up->h1 || (up->opts.http_via_curl && !curl_transport(up))) {
        bm_log(BM_LOG_ERROR, "upstream: cannot create the client");
        if (up->h1) {
            /* its handles close from the loop, then the memory goes */
            up->open = 1;
            up->dying = true;
            bm_h1client_free(up->h1);
        } else {
            free(up->ca_file);
            free(up);
        }
        return NULL;
    }
    return up;
}

void bm_upstream_free(bm_upstream_t *up)
{
    if (!up || up->dying)
        return;
    up->dying = true;
    up->open = up->curl ? 2 : 1;
    if (up->curl)
        bm_upcurl_free(up->curl);
    bm_h1client_free(up->h1);
}

size_t bm_upstream_active(const bm_upstream_t *up)
{
    if (!up)
        return 0;
    return bm_h1client_active(up->h1) + (up->curl ? bm_upcurl_active(up->curl) : 0);
}

int bm_upstream_set_node_limit(bm_upstream_t *up, const char *base_url, uint32_t max_connections)
{
    if (!up || !base_url)
        return BM_EINVAL;
    bm_uprules_url_t u;
    if (!bm_uprules_parse_url(base_url, &u))
        return BM_EINVAL;
    if (!max_connections)
        max_connections = up->opts.node_max_connections;
    if (u.https || up->opts.http_via_curl) {
        /* libcurl bounds every host alike: the largest node bound wins, as for nodes that
         * share one origin below. Without it, a burst left up to max_connects (256) idle
         * connections open to one node. */
        if (max_connections > up->opts.max_host_connections) {
            up->opts.max_host_connections = max_connections;
            if (up->curl)
                bm_upcurl_set_host_limit(up->curl, max_connections);
        }
        return 0;
    }
    return bm_h1client_set_node_limit(up->h1, base_url, max_connections);
}

bm_xfer_t *bm_upstream_start(bm_upstream_t *up, const bm_xfer_req_t *req, const bm_xfer_cbs_t *cbs,
                             void *ud)
{
    if (!up || !req || !cbs || up->dying)
        return NULL;
    bm_uprules_url_t u;
    if (!req->url || !bm_uprules_parse_url(req->url, &u)) {
        bm_log_limited(&up->refuse_log, BM_LOG_WARN, "upstream: refusing a request: bad URL");
        return NULL;
    }
    const char *method = req->method;
    size_t mlen = method ? strlen(method) : 0;
    if (mlen > BM_UPRULES_METHOD_MAX || !bm_uprules_token(method, mlen) || !cbs->on_done ||
        (req->stream && !cbs->on_data)) {
        bm_log_limited(&up->refuse_log, BM_LOG_WARN,
                       "upstream: refusing a request: bad method or missing callback");
        return NULL;
    }
    if (!u.https && !up->opts.http_via_curl)
        return bm_h1client_start(up->h1, req, &u, cbs, ud);
    bm_upcurl_t *curl = curl_transport(up);
    return curl ? bm_upcurl_start(curl, req, &u, cbs, ud) : NULL;
}

void bm_upstream_cancel(bm_xfer_t *x)
{
    if (!x)
        return;
    if (x->native)
        bm_h1client_cancel(x);
    else
        bm_upcurl_cancel(x);
}

void bm_upstream_pause(bm_xfer_t *x)
{
    if (!x)
        return;
    if (x->native)
        bm_h1client_pause(x);
    else
        bm_upcurl_pause(x);
}

void bm_upstream_resume(bm_xfer_t *x)
{
    if (!x)
        return;
    if (x->native)
        bm_h1client_resume(x);
    else
        bm_upcurl_resume(x);
}

void bm_xfer_result_fill(bm_xfer_result_t *res, const bm_xfer_end_t *e, char *detail, size_t n)
{
    int err = e->err;
    detail[0] = '\0';
    if (err)
        bm_uprules_mask(detail, n, e->cause, e->secret);
    bm_buf_t *body = NULL;
    if (!e->stream && !err) {
        body = bm_str_finish(e->body);
        if (!body) {
            err = BM_ENOMEM;
            bm_uprules_mask(detail, n, "out of memory for the response body", NULL);
        }
    }
    if (!e->head_done)
        bm_hdrs_clear(e->hdrs);
    *res = (bm_xfer_result_t){
        .err = err,
        .status = e->head_done ? e->status : 0,
        .headers = e->hdrs,
        .body = body,
        .detail = detail,
        .elapsed_us = bm_clock_mono_us() - e->start_us,
        .ttfb_us = e->head_done ? e->head_us - e->start_us : 0,
    };
}
