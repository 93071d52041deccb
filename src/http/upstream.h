/* SPDX-License-Identifier: MIT */
/*
 * upstream: HTTP(S) requests to beacon nodes on the libuv loop. One transfer (bm_xfer_t)
 * is one request to one node. Two transports sit behind this one interface, chosen by
 * the URL's scheme:
 *   - http://: a native HTTP/1.1 client (h1client.c) with a keep-alive pool per node
 *     (at most node_max_connections, or what bm_upstream_set_node_limit says for that
 *     node), built for the hot path of every proxied request and duty race;
 *   - https://: libcurl's multi interface (upstream_curl.c): TLS, certificates, h2
 *     multiplexing for hosted providers. libcurl is initialised on the first https://
 *     request only.
 * A caller cannot tell them apart except by speed: the same callbacks, errors, header
 * rules and re-entrancy guarantees (uprules.h holds the rules both apply).
 *
 * What every transfer does, whatever the caller passes:
 *   - never follows redirects and speaks only http and https, so a request can reach
 *     nothing but the URL it was given;
 *   - drops hop-by-hop header fields (and those named in Connection), drops the client's
 *     Accept-Encoding and asks for identity (policies must read bodies; `compress` asks
 *     an https node for gzip, which libcurl inflates, so they still do), never sends
 *     Expect, sets Host from the URL, accepts any media type when the caller sent no
 *     Accept (as libcurl does), and adds no Content-Type of its own;
 *   - takes credentials from the URL (https://user:pass@host, sent as Basic auth; an
 *     Authorization field in `headers` is then dropped so the node's credentials win) and
 *     never logs them or lets them into `detail`;
 *   - ignores proxy settings from the environment (http_proxy, ...);
 *   - keeps every response header field as received, framing fields (Content-Length,
 *     Transfer-Encoding) included: what to forward is the caller's decision. Trailer
 *     fields of a chunked body are not reported. Interim heads 100, 102 and 103 are
 *     skipped; 101 or another 1xx, a response head over 64 KiB or a status below 100
 *     fail the transfer with BM_EPROTO.
 *
 * Re-entrancy: every function here may be called from anywhere, including from inside
 * on_head/on_data of any transfer. on_done always runs from the loop, never inside a
 * bm_upstream_* call; it may start, cancel or free anything. No callback of a transfer
 * runs after its cancel. bm_upstream_free from inside a callback is deferred until the
 * stack has unwound (no callback runs after it).
 */
#ifndef BM_UPSTREAM_H
#define BM_UPSTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "base/buf.h"
#include "base/hdrs.h"

typedef struct bm_upstream bm_upstream_t;
typedef struct bm_xfer bm_xfer_t;

typedef struct bm_upstream_opts {
    uint32_t max_connects; /* libcurl (https): idle connections kept (default 256; 0: 256) */
    uint32_t max_host_connections; /* libcurl (https): per host at once; 0 = unlimited */
    uint32_t node_max_connections; /* http://: connections per node unless set per node
                                      (bm_upstream_set_node_limit); default 64; 0: 64 */
    uint32_t node_idle_close_ms;   /* http://: an idle pooled connection closes after this
                                      (default 30 s; 0: 30 s) */
    uint32_t node_max_requests;    /* http://: requests per connection before it is replaced
                                      (default 1000; 0: 1000) */
    bool http_via_curl;            /* send http:// through libcurl as well (tests compare the two
                                      transports with it; default false) */
    bool tls_verify;               /* verify peer certificates and host names (tls.verify) */
    const char *ca_file;           /* CA bundle (PEM) used instead of the system bundle; Debian's
                                      libcurl still reads /etc/ssl/certs (CAPATH); copied */
} bm_upstream_opts_t;

/** Fills `o` with the defaults above. */
void bm_upstream_opts_default(bm_upstream_opts_t *o);

/**
 * Creates the client on `loop`. NULL on failure (logged). The first https:// request in
 * the process (or the first client with http_via_curl) runs curl_global_init, once,
 * under pthread_once; curl_global_cleanup is never called.
 */
bm_upstream_t *bm_upstream_new(uv_loop_t *loop, const bm_upstream_opts_t *opts);

/**
 * Cancels every transfer still running (their on_done does not run) and frees the client.
 * Handles close asynchronously: run the loop afterwards so that uv_loop_close() succeeds.
 */
void bm_upstream_free(bm_upstream_t *up);

/** Number of transfers started and not yet done or cancelled. */
size_t bm_upstream_active(const bm_upstream_t *up);

/**
 * Bounds the connections to the node of `base_url` (an http:// upstream's configured
 * URL) to `max_connections` at once (0: node_max_connections). Transfers beyond it wait
 * for a connection, first come first served. Nodes sharing one origin
 * (scheme://user@host:port) share one pool; the largest bound wins. https:// nodes are
 * bounded by max_host_connections instead (returns 0). Returns 0 or BM_EINVAL/BM_ENOMEM.
 */
int bm_upstream_set_node_limit(bm_upstream_t *up, const char *base_url, uint32_t max_connections);

/** One request. Everything is copied or referenced by bm_upstream_start; nothing is kept. */
typedef struct bm_xfer_req {
    const char *method;        /* "GET", "POST", ... */
    const char *url;           /* complete URL (see bm_url_join in url.h); never a client's input */
    const bm_hdrs_t *headers;  /* end-to-end fields to send (filtered as described above) */
    const bm_hdrs_t *extra;    /* per-node fields added after `headers` (API keys), or NULL */
    const char *forwarded_for; /* sent as X-Forwarded-For (the client's address, to a node
                                  that opted in: upstreams[].forwardedFor), or NULL */
    bm_buf_t *body;            /* request body (a reference is taken), or NULL */
    uint32_t connect_timeout_ms; /* 0: the default of timeouts.connect */
    uint32_t timeout_ms;         /* whole transfer; 0: none (long-lived streams) */
    uint32_t idle_timeout_ms;    /* no byte received for this long fails BM_ETIMEDOUT; 0: none.
                                    Counts from the start; never fires while paused by us */
    size_t max_response_bytes;   /* buffered mode only; larger fails BM_ETOOBIG; 0: 64 MiB */
    bool stream;                 /* body goes to on_data as it arrives, nothing buffered */
    bool compress; /* a read whose answer may be large: an https node (a hosted, metered one)
                      is asked for gzip and libcurl inflates it, so the owner still reads
                      identity bytes (its Content-Encoding and compressed Content-Length are
                      removed from the head); http nodes are always asked for identity */
} bm_xfer_req_t;

/** What a transfer ended with. Everything is borrowed for the duration of on_done. */
typedef struct bm_xfer_result {
    int err;                  /* 0 when a complete response arrived, else a BM_E* code */
    int status;               /* HTTP status, 0 when none was received */
    const bm_hdrs_t *headers; /* response header fields (final response only) */
    bm_buf_t *body;     /* buffered mode: the body (possibly empty); NULL when streamed or failed */
    const char *detail; /* human-readable cause of err (libcurl's text), "" when none */
    uint64_t elapsed_us; /* start to done */
    uint64_t ttfb_us;    /* start to the response head (0 when none) */
} bm_xfer_result_t;

/**
 * Returned by on_data to pause the transfer; the bytes passed were consumed. The client
 * may already hold the next piece (at most one read buffer); it is delivered after the
 * resume. A transfer whose every byte was delivered may complete (on_done) while paused.
 */
#define BM_XFER_PAUSE 1

typedef struct bm_xfer_cbs {
    /** Optional: the final response head arrived (1xx interim responses are skipped).
     *  `headers` stay valid and unchanged until on_done has returned (they are the
     *  result's `headers`), unless the transfer is cancelled first. */
    void (*on_head)(bm_xfer_t *x, int status, const bm_hdrs_t *headers, void *ud);
    /** Stream mode: a piece of the body. Return 0, or BM_XFER_PAUSE to stop receiving. */
    int (*on_data)(bm_xfer_t *x, const char *p, size_t n, void *ud);
    /** Runs exactly once per transfer that was not cancelled; the transfer is freed after. */
    void (*on_done)(bm_xfer_t *x, const bm_xfer_result_t *res, void *ud);
} bm_xfer_cbs_t;

/**
 * Starts a transfer. `cbs` is copied. Returns the transfer, or NULL when it could not be
 * created (then no callback runs). Failures after the start (refused, timeout, ...) are
 * reported through on_done.
 */
bm_xfer_t *bm_upstream_start(bm_upstream_t *up, const bm_xfer_req_t *req, const bm_xfer_cbs_t *cbs,
                             void *ud);

/** Cancels a transfer: no callback runs for it any more and it is freed. Idempotent only
 *  until the transfer is freed: never call it after on_done or a previous cancel. */
void bm_upstream_cancel(bm_xfer_t *x);

/** Stops receiving (backpressure): no on_data until bm_upstream_resume. Works in buffered
 *  mode too (the body just stops growing). */
void bm_upstream_pause(bm_xfer_t *x);

/** Resumes receiving after BM_XFER_PAUSE or bm_upstream_pause. Held bytes are delivered
 *  from the loop (libcurl may run on_data for them before this returns; never on_done). */
void bm_upstream_resume(bm_xfer_t *x);

#endif /* BM_UPSTREAM_H */
