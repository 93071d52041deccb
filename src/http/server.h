/* SPDX-License-Identifier: MIT */
/*
 * server: the HTTP/1.1 listener. It accepts connections on a libuv loop, parses requests
 * with the http1 module (keep-alive, pipelining, chunked bodies, Expect: 100-continue),
 * enforces the limits and timeouts that keep slow or hostile clients from pinning
 * connections, and writes responses: fixed-length, chunked, or streamed for as long as
 * the handler likes (SSE), with reference-counted buffers written without copies.
 *
 * A request reaches the handler once its body is complete (bodies are bounded by
 * max_body_bytes, and every policy that forwards a body needs all of it). Requests of
 * one connection are handled one at a time, in order: a pipelined request waits in the
 * input buffer until the previous response has ended.
 *
 * Errors the server detects itself are answered in the Beacon API shape
 * {"code":N,"message":"..."} and close the connection when the stream cannot be trusted
 * any more (400, 413, 414, 431, timeouts).
 *
 * Lifetime of a request: the handler owns it from the handler call until it calls
 * bm_resp_end() or bm_resp_abort(), exactly once, even when the client has gone away
 * (the abort callback says so early; writes after that are dropped silently).
 */
#ifndef BM_SERVER_H
#define BM_SERVER_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "base/buf.h"
#include "base/hdrs.h"
#include "http/tls.h"

typedef struct bm_server bm_server_t;
typedef struct bm_req bm_req_t;

typedef struct bm_server_opts {
    size_t max_target_bytes;    /* longer request target: 414 (server.maxTargetBytes) */
    size_t max_header_bytes;    /* all header fields together longer: 431 (server.maxHeaderBytes) */
    size_t max_body_bytes;      /* body longer: 413 (server.maxBodyBytes) */
    uint32_t header_timeout_ms; /* the whole request head must arrive within (server.headerTimeout);
                                   also the wait for the first byte of a new connection */
    uint32_t body_timeout_ms;   /* max gap between body bytes (server.bodyTimeout) */
    uint32_t idle_timeout_ms;   /* keep-alive idle between requests (server.idleTimeout) */
    uint32_t max_connections; /* accepted at once; more closed at accept (server.maxConnections) */
    uint32_t max_connections_per_client; /* from one client address at once; more closed at
                                            accept (server.maxConnectionsPerClient) */
    uint32_t body_deadline_ms; /* the whole request body must arrive within this from the end
                                  of its head (server.bodyDeadline): 408 */
    uint32_t send_timeout_ms;  /* output queued and none of it taken by the client for this
                                  long: the connection is closed, an owned request learns it
                                  through its abort callback (server.sendTimeout) */
    size_t write_high_water;   /* bm_resp_writable() turns false above this (default 1 MiB) */
    bool reuse_port; /* SO_REUSEPORT: a new process may bind the port while the old one still
                        drains (server.reusePort; default off) */
} bm_server_opts_t;

/** Fills `o` with the defaults above. (bm_server_new also takes a zero field as its default.) */
void bm_server_opts_default(bm_server_opts_t *o);

/**
 * Called for every complete request. The handler must end the request exactly once. It
 * runs from the loop, never from inside a call into the server (bm_resp_end of the
 * previous request, bm_server_shutdown), so it may end its request at once or later.
 */
typedef void (*bm_server_handler_fn)(bm_req_t *req, void *ud);

/** Creates a server on `loop` (nothing listens yet). NULL on allocation failure. */
bm_server_t *bm_server_new(uv_loop_t *loop, const bm_server_opts_t *opts,
                           bm_server_handler_fn handler, void *ud);

/**
 * Replaces the limits and timeouts (a configuration reload): connections accepted from now
 * on parse with the new size limits; every deadline armed from now on (head, body, idle)
 * and the next accept's connection count use the new values. A request being parsed keeps
 * the size limits it started with.
 */
void bm_server_set_opts(bm_server_t *srv, const bm_server_opts_t *opts);

/**
 * Binds and listens on host:port (IPv4 or IPv6 literal, or "localhost"). Port 0 picks a
 * free port (see bm_server_port). Returns 0 or a BM_E* code.
 */
int bm_server_listen(bm_server_t *srv, const char *host, int port);

/**
 * Listens on `fd`, a socket already bound and listening that was handed over (systemd
 * socket activation); the server owns it from now on. Returns 0 or a BM_E* code (then the
 * caller still owns `fd`).
 */
int bm_server_listen_fd(bm_server_t *srv, int fd);

/**
 * Makes the listener speak TLS with `ctx` (takes a reference; NULL: plain HTTP again).
 * Set it before bm_server_listen for a TLS listener; a later call is a reload: connections
 * accepted from then on use the new context, open ones keep the one they started with.
 */
void bm_server_set_tls(bm_server_t *srv, bm_tls_ctx_t *ctx);

/** The port actually bound (useful after port 0), or -1 before listening. */
int bm_server_port(const bm_server_t *srv);

/** Number of open client connections. */
size_t bm_server_connection_count(const bm_server_t *srv);

/** The server's own counters since its start. */
typedef struct bm_server_stats {
    uint64_t accepted; /* connections accepted */
    uint64_t refused;  /* connections closed at accept (maxConnections, shutdown) */
    uint64_t requests; /* requests handed to the handler */
    uint64_t rejected; /* requests the server answered itself (malformed, too large, timeouts) */
} bm_server_stats_t;

/** Copies the counters into `out`. */
void bm_server_stats(const bm_server_t *srv, bm_server_stats_t *out);

/** A request that ended, as the access log and the request counters see it. */
typedef struct bm_req_summary {
    const char *method;
    const char *target;      /* as sent (mask secrets before writing it anywhere) */
    const char *peer;        /* the client's address (bm_req_set_client, or the peer) */
    const char *route_class; /* bm_req_set_route_class, or NULL */
    void *scope;             /* bm_req_set_scope, or NULL */
    int status;              /* the status sent; 0: none (the client left first) */
    uint64_t body_bytes;     /* response body bytes queued */
    uint64_t duration_us;    /* from the complete request head to the end */
    uint64_t upstreams;      /* bit i: node i served it (bm_req_add_upstream) */
    bool cut;                /* ended by bm_resp_abort, or the client was gone */
} bm_req_summary_t;

/**
 * Calls `fn` for every request the handler ended, right before the request is released,
 * from inside bm_resp_end / bm_resp_abort / bm_resp_send / bm_resp_error: it must not call
 * into the server. The summary is borrowed for the call. One listener; NULL: none.
 */
void bm_server_on_end(bm_server_t *srv, void (*fn)(const bm_req_summary_t *s, void *ud), void *ud);

/**
 * Graceful shutdown: stops accepting, closes idle keep-alive connections, lets requests
 * in flight finish (their connections close after the response), answers the first
 * request of a connection accepted just before whose request had not arrived yet (then
 * closes it; its connect raced the shutdown, e.g. on a socket shared with the process
 * that replaces this one), and after `grace_ms`
 * closes whatever is left (streams such as SSE included). `done` runs once, from the
 * loop (never from inside this call), when the last connection has closed and every
 * handler has ended its request; the server can then be freed, from `done` itself too.
 * Safe to call twice (the second call does nothing), and from inside a handler.
 */
void bm_server_shutdown(bm_server_t *srv, uint32_t grace_ms,
                        void (*done)(bm_server_t *srv, void *ud), void *ud);

/**
 * Frees the server. Only valid after bm_server_shutdown's `done` ran, or if the server
 * never listened. Handles are closed asynchronously: run the loop afterwards so that
 * uv_loop_close() succeeds.
 */
void bm_server_free(bm_server_t *srv);

/* ---- the request ---------------------------------------------------------------- */

/** The method as sent ("GET", "POST", ...). */
const char *bm_req_method(const bm_req_t *req);

/** The raw request target ("/eth/v1/node/health?x=1"), NUL-terminated. */
const char *bm_req_target(const bm_req_t *req);

/**
 * Replaces the request target with target[0..len) (origin-form: it must start with '/'),
 * copied; path and query follow it. What a front handler does before dispatching a request
 * whose first segments it consumed (a network id, an API key in the path), so that nothing
 * after it (handlers, forwarded requests, log lines) sees them. Returns 0, BM_EINVAL (not
 * origin-form, or a NUL byte) or BM_ENOMEM.
 */
int bm_req_set_target(bm_req_t *req, const char *target, size_t len);

/**
 * Adds fields (copied) to whatever response head this request gets, from any handler or
 * from the server's own error answers to it: what a front handler decides for every answer
 * (CORS). Returns 0 or BM_ENOMEM.
 */
int bm_req_add_resp_fields(bm_req_t *req, const bm_hdrs_t *h);

/** The path part of the target (before '?'), with its length. Not percent-decoded. */
const char *bm_req_path(const bm_req_t *req, size_t *len);

/** The query part after '?' (without it), or NULL when there is none. */
const char *bm_req_query(const bm_req_t *req, size_t *len);

/** Query parameter `name` of the request into out[0..cap) (see bm_url_query_param: its
 *  length, BM_ENOTFOUND when absent, BM_ETOOBIG when it does not fit). */
int bm_req_query_param(const bm_req_t *req, const char *name, char *out, size_t cap);

/** All request header fields in arrival order. Borrowed; valid while the request lives. */
const bm_hdrs_t *bm_req_headers(const bm_req_t *req);

/**
 * Removes every field named `name` (case-insensitive) from the request, so that nothing
 * after the caller sees or forwards it (a client's credential for beaconmux itself).
 * Returns how many were removed.
 */
size_t bm_req_remove_header(bm_req_t *req, const char *name);

/** The first header named `name` (case-insensitive), or NULL. */
const char *bm_req_header(const bm_req_t *req, const char *name);

/**
 * The complete request body, or NULL when empty. Borrowed: take a ref to keep it. The
 * bytes are followed by a NUL that len does not count (text parsers can use it as is).
 */
bm_buf_t *bm_req_body(const bm_req_t *req);

/** The peer address as text ("127.0.0.1"). */
const char *bm_req_peer(const bm_req_t *req);

/** Monotonic microseconds at which the request head was complete. */
uint64_t bm_req_start_us(const bm_req_t *req);

/** True once the client connection is gone (closed, reset, timed out). */
bool bm_req_client_gone(const bm_req_t *req);

/**
 * Registers a callback that runs once if the client goes away before the response ended
 * (read EOF or error while the handler owns the request, a failed write, the grace period
 * of a shutdown). It never runs from inside this request's own bm_resp_* calls;
 * registered after the client left, it runs from the loop shortly after. The handler must still end
 * the request; writes then return BM_ECLOSED.
 */
void bm_req_on_abort(bm_req_t *req, void (*cb)(bm_req_t *req, void *ud), void *ud);

/**
 * Registers a callback that runs once when the handler has ended the request (from inside
 * the bm_resp_end/abort/send/error call that ended it), whether or not the client was still
 * there: for whoever counts the requests a handler still owns (a reload waits for the last
 * request of a replaced configuration). The request must not be touched from `cb`; work that
 * frees what the ending caller may still use must be deferred to the loop. One per request;
 * a second call replaces the first.
 */
void bm_req_on_end(bm_req_t *req, void (*cb)(void *ud), void *ud);
/** Names the request's route class for its summary (a string that outlives the request:
 *  a literal). The router sets it when it dispatches. */
void bm_req_set_route_class(bm_req_t *req, const char *cls);

/** The client's address as the edge judged it (through trusted proxies' X-Forwarded-For),
 *  for the summary; without it the summary names the peer. Copied (cut at 63 bytes). */
void bm_req_set_client(bm_req_t *req, const char *addr);

/** Names what took the request in charge (the front: its network), for its summary: the
 *  end listener tells networks apart by it (their node indices are their own). */
void bm_req_set_scope(bm_req_t *req, void *scope);

/** The first `n` bytes of the path as sent are a credential (an API key as a path
 *  segment): the summary's target shows "/" and three stars in their place. */
void bm_req_mask_path_prefix(bm_req_t *req, size_t n);

/** Notes that upstream node `index` (0..63, the pool's order) served the request, for its
 *  summary; other indices are ignored. */
void bm_req_add_upstream(bm_req_t *req, int index);

/** Per-request user pointer for the handler's own state. */
void bm_req_set_data(bm_req_t *req, void *data);
void *bm_req_get_data(const bm_req_t *req);

/* ---- the response ----------------------------------------------------------------- */

/**
 * Sends the status line and headers. `content_length` >= 0 gives a fixed-length body;
 * -1 streams the body chunked (HTTP/1.1) or until close (HTTP/1.0). The server adds
 * Content-Length or Transfer-Encoding and Connection itself; `hdrs` must not contain
 * them (hop-by-hop fields in `hdrs` are skipped; `Connection: close` among them still
 * makes the connection close after this response). Fields with CR, LF or NUL bytes are
 * dropped. A Date field is added unless `hdrs` has one. `hdrs` may be NULL and is copied
 * before the call returns. For HEAD requests, and for 204 and 304, the body is
 * suppressed. `status` must be 200..599. Returns 0, BM_EINVAL (bad status, or started
 * already), or BM_ECLOSED when the client is gone. Bytes leave at the end of the current
 * loop iteration, together with whatever body was queued by then.
 */
int bm_resp_start(bm_req_t *req, int status, const bm_hdrs_t *hdrs, int64_t content_length);

/**
 * Queues body bytes; takes its own reference on `b` until they are written (small bodies
 * are copied instead). Returns 0, BM_ECLOSED, or BM_ETOOBIG when the bytes pass the
 * announced Content-Length (the excess is dropped).
 */
int bm_resp_write(bm_req_t *req, bm_buf_t *b);

/** Queues a copy of p[0..n). Returns 0 or BM_ECLOSED. */
int bm_resp_write_copy(bm_req_t *req, const void *p, size_t n);

/**
 * Ends the response (for chunked, writes the last chunk) and releases the request. For a
 * fixed length that was not reached, the connection is closed instead (the client sees a
 * truncated body, never a spliced one). Ending a request that was never started answers
 * 500 (a handler bug, logged).
 */
void bm_resp_end(bm_req_t *req);

/**
 * Ends the request by closing the connection at once, without finishing the body: what a
 * proxy does when its upstream failed after the first byte reached the client (bytes
 * already queued are still written, then the connection closes). If no byte of the
 * response was sent yet, a 502 error answer is sent instead and the connection stays
 * usable.
 */
void bm_resp_abort(bm_req_t *req);

/** start + write + end with a fixed-length body. `content_type` may be NULL. */
void bm_resp_send(bm_req_t *req, int status, const char *content_type, bm_buf_t *body,
                  const bm_hdrs_t *extra);

/**
 * bm_resp_send of the text built in `s` (status 200), or a 500 error answer when building
 * it ran out of memory. Takes the text: `s` is left empty.
 */
void bm_resp_send_str(bm_req_t *req, const char *content_type, bm_str_t *s);

/**
 * Answers {"code":status,"message":"..."} (application/json) and ends the request. When
 * the response has started already it can only be cut: bm_resp_abort.
 */
void bm_resp_error(bm_req_t *req, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/** Bytes queued on the connection and not yet written to the socket. */
size_t bm_resp_pending_bytes(const bm_req_t *req);

/**
 * Bytes the client has not taken yet: bm_resp_pending_bytes plus what the kernel still
 * holds in the socket's send queue, unacknowledged (Linux SIOCOUTQ). Loopback and LAN
 * sockets grow their send buffer to megabytes by themselves, so a client that stopped
 * reading shows in bm_resp_pending_bytes only after the kernel has buffered that much;
 * this sum shows it at once. One system call: meant for a check per event on long
 * streams, not per byte. Bytes of a write in progress may count twice (an overestimate
 * of at most one write).
 */
size_t bm_resp_unsent_bytes(const bm_req_t *req);

/** False while more than write_high_water bytes are pending (the client reads slowly). */
bool bm_resp_writable(const bm_req_t *req);

/**
 * Registers a callback that runs when pending bytes fall back under the low-water mark
 * (half of write_high_water) after bm_resp_writable() was false. Used to resume a paused
 * upstream (backpressure).
 */
void bm_resp_on_drain(bm_req_t *req, void (*cb)(bm_req_t *req, void *ud), void *ud);

/** True once any byte of the response (the status line) was queued. */
bool bm_resp_started(const bm_req_t *req);

/** The reason phrase for a status code ("OK", "Not Found"; "" when unknown). */
const char *bm_http_reason(int status);

#endif /* BM_SERVER_H */
