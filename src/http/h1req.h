/* SPDX-License-Identifier: MIT */
/*
 * h1req: the bytes of an HTTP/1.1 request head for the native upstream client, without
 * I/O. A head is three parts so that the part that never changes for a node is built
 * once (bm_h1req_origin) and only the rest per request (bm_h1req_build):
 *
 *     GET /eth/v1/node/version HTTP/1.1\r\n        per request (the request line)
 *     Host: node.example:5052\r\n                  per node
 *     Authorization: Basic dXNlcjpwdw==\r\n        per node, when the URL has user info
 *     Accept: application/json\r\n ...             per request (the caller's fields, then
 *     Accept-Encoding: identity\r\n                 ours), ending with the empty line
 *     Content-Length: 42\r\n\r\n
 *
 * What goes out is what libcurl sent for the same request (the test suite checks both
 * transports against one server): the request target is the URL's path and query as
 * written, minus a fragment, with "." and ".." segments removed (RFC 3986 5.2.4); the
 * port is left out of Host when it is 80; the user info is percent-decoded and sent as
 * Basic credentials; the caller's fields pass bm_uprules_fields; an Accept of any media type is
 * added when the caller sent no Accept; Content-Length goes with every POST and every request that
 * has a body (never with HEAD, whose body is dropped).
 */
#ifndef BM_H1REQ_H
#define BM_H1REQ_H

#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"
#include "http/upstream.h"
#include "http/uprules.h"

/** What a node's origin gives every request to it. */
typedef struct bm_h1req_origin {
    char host[256]; /* for the resolver: the name, or the IP literal without brackets */
    char port[8];   /* decimal, "80" when the URL has none */
    bool ipv6;      /* host is a bracketed IPv6 literal in the URL */
    bm_str_t fixed; /* "Host: ...\r\n" and maybe "Authorization: Basic ...\r\n" */
    bool has_auth;  /* the URL carries credentials (the caller's Authorization is dropped) */
} bm_h1req_origin_t;

/**
 * Fills `o` (zero it first; bm_h1req_origin_dispose frees it) from the parsed URL.
 * Returns 0, BM_EINVAL when the port is not 1..65535 or the host is too long or
 * malformed, or BM_ENOMEM.
 */
int bm_h1req_origin(bm_h1req_origin_t *o, const bm_uprules_url_t *u);

/** Frees what bm_h1req_origin allocated. */
void bm_h1req_origin_dispose(bm_h1req_origin_t *o);

/**
 * Writes a request's own head parts into `out` (cleared first): the request line, whose
 * length goes to *line_len, then the caller's fields and ours down to the empty line.
 * The node's fixed part goes between the two on the wire. `target` is the URL's part
 * after the origin (bm_uprules_url_t.target). `has_body` is true when the request sends
 * Content-Length (see above); `body_len` its value. Returns 0, BM_EINVAL for a field that
 * cannot be sent, or BM_ENOMEM.
 */
int bm_h1req_build(bm_str_t *out, size_t *line_len, const char *method, const char *target,
                   const bm_xfer_req_t *req, bool drop_auth, bool has_body, size_t body_len);

#endif /* BM_H1REQ_H */
