/* SPDX-License-Identifier: MIT */
/*
 * h1resp: the HTTP/1.1 response parser of the native upstream client. Bytes in, events
 * out, no I/O and no clock, so it is unit-tested and fuzzed directly (fuzz/fuzz_h1resp.c:
 * the same events whatever the input's split).
 *
 * http-parser does the framing (status line, Content-Length, chunked, close-delimited,
 * keep-alive); this wrapper turns its callbacks into one event per call of
 * bm_h1resp_next, so that the caller runs its own callbacks (which may cancel, pause or
 * free anything) outside http-parser, and adds what the client needs on top:
 *   - interim heads: 100, 102 and 103 are skipped (their fields dropped); 101 or another
 *     1xx fails (bm_uprules_interim_skipped);
 *   - each head is at most max_head_bytes (BM_UPRULES_MAX_HEAD_BYTES in the client);
 *     between two runs of body data the framing bytes (chunk-size lines, extensions,
 *     trailers) too, since http-parser accepts endless chunk extensions without
 *     delivering a byte;
 *   - header fields are collected in order, duplicates kept, values trimmed of OWS, an
 *     obs-fold continuation joined with one space; trailer fields are ignored;
 *   - HEAD responses, 204 and 304 have no body whatever their Content-Length says.
 *
 * Error codes: a malformed or oversized head, or a forbidden 1xx, is BM_EPROTO; broken
 * body framing, or the connection closing before the end of the response, is
 * BM_ECONNRESET (the exchange broke mid-way, as libcurl reports it).
 */
#ifndef BM_H1RESP_H
#define BM_H1RESP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/hdrs.h"

typedef struct bm_h1resp bm_h1resp_t;

typedef enum {
    BM_H1RESP_MORE,  /* every byte given was consumed: feed more (or bm_h1resp_eof) */
    BM_H1RESP_HEAD,  /* the final head is complete: bm_h1resp_status, the fields in `hdrs` */
    BM_H1RESP_DATA,  /* body bytes: *data, *len, pointing into the input just given */
    BM_H1RESP_DONE,  /* the response is complete; bytes after it are not consumed */
    BM_H1RESP_ERROR, /* bm_h1resp_error says why; nothing more is parsed */
} bm_h1resp_ev_t;

/**
 * A parser whose heads (and framing runs) may be at most `max_head_bytes` (the client uses
 * BM_UPRULES_MAX_HEAD_BYTES; the fuzzer a small value to reach it). NULL on allocation
 * failure. Call bm_h1resp_reset before each response.
 */
bm_h1resp_t *bm_h1resp_new(size_t max_head_bytes);

/** Frees the parser (NULL is ignored). */
void bm_h1resp_free(bm_h1resp_t *r);

/**
 * Prepares for the response to one request. `head_request`: the request was HEAD (no
 * body follows whatever the head says). Fields of the final head are appended to `hdrs`,
 * which is cleared here and again at each interim head; the caller owns it, and it stays
 * valid after the parser moves on.
 */
void bm_h1resp_reset(bm_h1resp_t *r, bool head_request, bm_hdrs_t *hdrs);

/**
 * Parses p[0..n) up to the next event. *used is the number of bytes consumed (the caller
 * passes the rest in the next call). For BM_H1RESP_DATA, *data and *len name the body
 * bytes, inside p[0..n). BM_H1RESP_MORE means all n bytes were consumed (n may be 0).
 */
bm_h1resp_ev_t bm_h1resp_next(bm_h1resp_t *r, const char *p, size_t n, size_t *used,
                              const char **data, size_t *len);

/** The connection closed: BM_H1RESP_DONE when that ends a close-delimited body, else
 *  BM_H1RESP_ERROR (BM_ECONNRESET). */
bm_h1resp_ev_t bm_h1resp_eof(bm_h1resp_t *r);

/** Status code of the final head (after BM_H1RESP_HEAD), else 0. */
int bm_h1resp_status(const bm_h1resp_t *r);

/**
 * Length of the body announced by the final head: its Content-Length, 0 when the
 * response has no body (HEAD, 204, 304), -1 when chunked or delimited by the close.
 */
int64_t bm_h1resp_body_length(const bm_h1resp_t *r);

/** After BM_H1RESP_DONE: whether the node lets the connection carry another request. */
bool bm_h1resp_keep_alive(const bm_h1resp_t *r);

/** After BM_H1RESP_ERROR: the BM_E* code; *detail (may be NULL) a static description. */
int bm_h1resp_error(const bm_h1resp_t *r, const char **detail);

#endif /* BM_H1RESP_H */
