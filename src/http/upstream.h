/* SPDX-License-Identifier: MIT */
/*
 * upstream: HTTP(S) requests to beacon nodes with libcurl's multi interface driven by the
 * libuv loop (socket action: one uv_poll per socket, one uv_timer for curl's timeout).
 * One transfer (bm_xfer_t) is one request to one node. Connections are reused across
 * transfers through the multi handle's connection cache.
 *
 * What every transfer does, whatever the caller passes:
 *   - never follows redirects and speaks only http and https, so a request can reach
 *     nothing but the URL it was given;
 *   - drops hop-by-hop header fields (and those named in Connection), drops the client's
 *     Accept-Encoding and asks for identity (policies must read bodies; `compress` asks
 *     an https node for gzip and inflates it, so they still do), sends an empty
 *     Expect: (libcurl would otherwise stall up to 1 s before a body over 1 MiB), lets
 *     libcurl set Host from the URL, and adds no Content-Type of its own;
 *   - takes credentials from the URL (https://user:pass@host, sent as Basic auth; an
 *     Authorization field in `headers` is then dropped so the node's credentials win) and
 *     never logs them or lets them into `detail`;
 *   - ignores proxy settings from the environment (http_proxy, ...);
 *   - keeps every response header field as received, framing fields (Content-Length,
 *     Transfer-Encoding) included: what to forward is the caller's decision. Trailer
 *     fields of a chunked body are not reported.
 *
 * Re-entrancy: libcurl forbids multi calls from inside its callbacks. Every function here
 * may nevertheless be called from anywhere, including from inside on_head/on_data of any
 * transfer: starts, cancels, pauses and resumes requested while libcurl is on the stack
 * are applied right after it returns. on_done always runs outside libcurl and never inside
 * a bm_upstream_* call; it may start, cancel or free anything. bm_upstream_free from inside
 * a callback is deferred the same way (no callback runs after it).
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
    uint32_t max_connects; /* CURLMOPT_MAXCONNECTS: idle connections kept (default 256; 0: 256) */
    uint32_t max_host_connections; /* per host at once; 0 = unlimited (default 0) */
    bool tls_verify;               /* verify peer certificates and host names (tls.verify) */
    const char *ca_file;           /* CA bundle (PEM) used instead of the system bundle; Debian's
                                      libcurl still reads /etc/ssl/certs (CAPATH); copied */
} bm_upstream_opts_t;

/** Fills `o` with the defaults above. */
void bm_upstream_opts_default(bm_upstream_opts_t *o);

/**
 * Creates the client on `loop`. NULL on failure (logged). The first call in the process
 * runs curl_global_init (once, under pthread_once); curl_global_cleanup is never called.
 */
bm_upstream_t *bm_upstream_new(uv_loop_t *loop, const bm_upstream_opts_t *opts);

/**
 * Cancels every transfer still running (their on_done does not run) and frees the client.
 * Handles close asynchronously: run the loop afterwards so that uv_loop_close() succeeds.
 */
void bm_upstream_free(bm_upstream_t *up);

/** Number of transfers started and not yet done or cancelled. */
size_t bm_upstream_active(const bm_upstream_t *up);

/** One request. Everything is copied or referenced by bm_upstream_start; nothing is kept. */
typedef struct bm_xfer_req {
    const char *method;       /* "GET", "POST", ... */
    const char *url;          /* complete URL (see bm_url_join in url.h); never a client's input */
    const bm_hdrs_t *headers; /* end-to-end fields to send (filtered as described above) */
    const bm_hdrs_t *extra;   /* per-node fields added after `headers` (API keys), or NULL */
    bm_buf_t *body;           /* request body (a reference is taken), or NULL */
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
 * Returned by on_data to pause the transfer; the bytes passed were consumed. libcurl may
 * already hold the next piece (at most one read buffer); it is delivered after the resume.
 * A transfer whose every byte was delivered may complete (on_done) while paused.
 */
#define BM_XFER_PAUSE 1

typedef struct bm_xfer_cbs {
    /** Optional: the final response head arrived (1xx interim responses are skipped). */
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

/** Resumes receiving after BM_XFER_PAUSE or bm_upstream_pause. Called outside libcurl, it
 *  may run on_data for the held bytes before it returns (never on_done). */
void bm_upstream_resume(bm_xfer_t *x);

#endif /* BM_UPSTREAM_H */
