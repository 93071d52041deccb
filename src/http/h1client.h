/* SPDX-License-Identifier: MIT */
/*
 * h1client: the native HTTP/1.1 transport behind bm_upstream for http:// nodes, on the
 * caller's libuv loop. libcurl stays for https:// (upstream_curl.c); this one exists
 * because a proxied request through libcurl cost about four times what it costs nginx
 * (docs/upstream.md), and a duty race pays that on every node.
 *
 * Per node (a URL's "http://[userinfo@]host[:port]" origin):
 *   - a keep-alive pool of at most max_connections connections (64 unless set by
 *     bm_h1client_set_node_limit), reused last in, first out; an idle connection is closed
 *     after idle_close_ms, a connection after max_requests requests; a transfer that finds
 *     the pool full waits, first come first served, for a connection to come back;
 *   - the fixed part of the request head (Host, Authorization from the URL's user info)
 *     is prepared once; each request adds its request line and fields, and head and body
 *     go out with one uv_write of several buffers;
 *   - the host name is resolved with uv_getaddrinfo and kept for a minute (IP literals
 *     are parsed once); connecting tries the addresses in order within connect_timeout_ms;
 *     sockets get TCP_NODELAY and keepalive.
 *
 * Responses are parsed by h1resp (http-parser). A connection whose response was not read
 * to its end (cancelled, failed, timed out, answered early while the body was still being
 * sent, bytes after the end) is closed, never reused. A request on a reused connection
 * that fails before any response byte arrived (the node closed an idle keep-alive) is
 * sent once more on a fresh connection, whatever its method: Beacon API writes are
 * idempotent for a node that did receive the first copy, and losing a submission to a
 * keep-alive race is worse.
 *
 * The contract towards callers is bm_upstream's (upstream.h): the same callbacks, errors
 * and re-entrancy rules. In particular on_done never runs inside a call into this module
 * (failures found there are delivered from the loop), no callback runs after a cancel,
 * and bm_h1client_free inside a callback defers the teardown until the stack unwinds.
 * Like every libuv program that writes to sockets, the process must ignore SIGPIPE
 * (beaconmux's main does): a write to a connection the node reset returns an error then.
 * Internal to src/http/; upstream.c is the only caller.
 */
#ifndef BM_H1CLIENT_H
#define BM_H1CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "http/upstream.h"
#include "http/uprules.h"

typedef struct bm_h1client bm_h1client_t;

typedef struct bm_h1client_opts {
    uint32_t max_connections; /* per node unless set per node; 0: 64 */
    uint32_t idle_close_ms;   /* an idle pooled connection is closed after this; 0: 30 s */
    uint32_t max_requests;    /* requests per connection before it is replaced; 0: 1000 */
} bm_h1client_opts_t;

/**
 * Creates the transport on `loop`; NULL on allocation failure. `on_closed(ud)` runs once,
 * from the loop, when a bm_h1client_free has finished closing every handle.
 */
bm_h1client_t *bm_h1client_new(uv_loop_t *loop, const bm_h1client_opts_t *opts,
                               void (*on_closed)(void *ud), void *ud);

/**
 * Cancels every transfer (no callback runs for them) and closes every connection and
 * handle; deferred while a callback of this transport is on the stack. The memory goes
 * when the handles have closed (then on_closed runs).
 */
void bm_h1client_free(bm_h1client_t *c);

/** Transfers started and neither done nor cancelled. */
size_t bm_h1client_active(const bm_h1client_t *c);

/**
 * Bounds the pool of the node whose origin starts `url` ("http://host:port/..." or the
 * origin alone) to `max` connections at once (0: the client's default). When several
 * configured upstreams share an origin they share one pool; the largest bound wins.
 * Returns 0, BM_EINVAL for a URL this transport does not serve, or BM_ENOMEM.
 */
int bm_h1client_set_node_limit(bm_h1client_t *c, const char *url, uint32_t max);

/**
 * Starts a transfer. The caller (upstream.c) has checked the method, the callbacks and
 * the URL (`u`, parsed from req->url, not https). Returns NULL when the request cannot be
 * sent as given (a field that is not a token or a value with CR/LF/NUL) or on allocation
 * failure; then no callback runs.
 */
bm_xfer_t *bm_h1client_start(bm_h1client_t *c, const bm_xfer_req_t *req, const bm_uprules_url_t *u,
                             const bm_xfer_cbs_t *cbs, void *ud);

/** bm_upstream_cancel, bm_upstream_pause and bm_upstream_resume for a native transfer. */
void bm_h1client_cancel(bm_xfer_t *x);
void bm_h1client_pause(bm_xfer_t *x);
void bm_h1client_resume(bm_xfer_t *x);

#endif /* BM_H1CLIENT_H */
