/* SPDX-License-Identifier: MIT */
/*
 * upstream_curl: the libcurl transport behind bm_upstream (https:// nodes, and http://
 * when bm_upstream_opts_t.http_via_curl is set). libcurl's multi interface on the libuv
 * loop; docs/upstream.md describes how it is driven and its re-entrancy rules, which are
 * bm_upstream's (upstream.h). Internal to src/http/; upstream.c is the only caller.
 */
#ifndef BM_UPSTREAM_CURL_H
#define BM_UPSTREAM_CURL_H

#include <stddef.h>
#include <uv.h>

#include "http/upstream.h"
#include "http/uprules.h"

typedef struct bm_upcurl bm_upcurl_t;

/**
 * Creates the transport on `loop` with `opts` (copied; max_connects, max_host_connections,
 * tls_verify, ca_file are used). The first call in the process runs curl_global_init
 * (once, under pthread_once). NULL on failure (logged). `on_closed(ud)` runs once, from
 * the loop, when a bm_upcurl_free has finished closing its handles.
 */
bm_upcurl_t *bm_upcurl_new(uv_loop_t *loop, const bm_upstream_opts_t *opts,
                           void (*on_closed)(void *ud), void *ud);

/** Cancels every transfer without callbacks and closes the transport; deferred while
 *  libcurl or a callback of this transport is on the stack. */
void bm_upcurl_free(bm_upcurl_t *up);

/**
 * Bounds the connections libcurl keeps to any one host (busy and idle together) to `max`
 * (CURLMOPT_MAX_HOST_CONNECTIONS; 0: unlimited); transfers beyond it wait in libcurl for
 * a connection. One value for the whole transport: libcurl has no per-host setting.
 */
void bm_upcurl_set_host_limit(bm_upcurl_t *up, uint32_t max);

/** Transfers started and neither done nor cancelled. */
size_t bm_upcurl_active(const bm_upcurl_t *up);

/**
 * Starts a transfer. The caller has checked the method, the callbacks and the URL (`u`,
 * parsed from req->url). NULL when the request cannot be sent as given or on allocation
 * failure; then no callback runs.
 */
bm_xfer_t *bm_upcurl_start(bm_upcurl_t *up, const bm_xfer_req_t *req, const bm_uprules_url_t *u,
                           const bm_xfer_cbs_t *cbs, void *ud);

/** bm_upstream_cancel, bm_upstream_pause and bm_upstream_resume for a libcurl transfer. */
void bm_upcurl_cancel(bm_xfer_t *x);
void bm_upcurl_pause(bm_xfer_t *x);
void bm_upcurl_resume(bm_xfer_t *x);

#endif /* BM_UPSTREAM_CURL_H */
