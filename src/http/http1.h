/* SPDX-License-Identifier: MIT */
/*
 * http1: the request side of HTTP/1.1, incremental, over http-parser 2.9.
 *
 * Bytes are fed as they arrive, split anywhere; the result never depends on where the
 * splits fall. The parser reports the request head (method, target, version, fields,
 * framing, Expect: 100-continue), the body bytes (chunked bodies already decoded) and the
 * end of each message, and stops after each message so that the caller can handle one
 * request at a time and feed the rest of its buffer later (pipelining).
 *
 * http-parser as packaged by Debian is built non-strict: it accepts `Host : x`, obs-fold
 * and bare LF line endings. RFC 9112 forbids them and they are the raw material of
 * request smuggling, so every byte of a request head also goes through a small state
 * machine of our own that rejects them with 400, along with a bare CR, control bytes in
 * field values, a request line that is not `method SP target SP HTTP/x.y CRLF`, a missing
 * or repeated Host in HTTP/1.1, Content-Length next to Transfer-Encoding, repeated
 * Content-Length, a Transfer-Encoding whose final coding is not chunked, and a GET or HEAD
 * with a body (Content-Length above 0 or any Transfer-Encoding). The same
 * machine enforces the size limits (414, 431; 413 for bodies) before http-parser's own
 * compiled-in limit could fire.
 *
 * The parser does no I/O and needs no loop: the fuzz harness drives it directly.
 */
#ifndef BM_HTTP1_H
#define BM_HTTP1_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/hdrs.h"

typedef struct bm_http1 bm_http1_t;

typedef struct bm_http1_limits {
    size_t max_target_bytes; /* request target longer: 414 (default 64 KiB) */
    size_t max_header_bytes; /* header section (field lines with their CRLF, and empty
                                lines before the request line) longer: 431 (default 16 KiB) */
    size_t max_body_bytes;   /* body longer: 413 (default 32 MiB) */
} bm_http1_limits_t;

/** Fills `l` with the defaults above. */
void bm_http1_limits_default(bm_http1_limits_t *l);

/** A complete request head. Everything is owned by the parser (see bm_http1_head). */
typedef struct bm_http1_head {
    const char *method;       /* "GET", "POST", ... (static storage) */
    const char *target;       /* raw request target, NUL-terminated */
    size_t target_len;        /* its length */
    int version_major;        /* always 1 (other versions are refused with 505) */
    int version_minor;        /* 0 or 1 (1.x with x > 1 is reported as sent) */
    const bm_hdrs_t *headers; /* fields in arrival order, values without surrounding OWS */
    bool keep_alive;          /* the connection may carry another request after this one */
    bool chunked;             /* Transfer-Encoding: chunked */
    int64_t content_length;   /* body length; 0 when absent; -1 when chunked */
    bool expect_continue;     /* HTTP/1.1 with Expect: 100-continue */
    bool is_head;             /* method is HEAD (the answer carries no body) */
} bm_http1_head_t;

/**
 * Event callbacks. They run inside bm_http1_feed and must not call bm_http1_feed or
 * bm_http1_next themselves. A callback that returns non-zero stops the parser with an
 * error: the value is the HTTP status to answer (400..599; anything else means 500).
 */
typedef struct bm_http1_callbacks {
    /** The head passed every check. The body (if any) follows. */
    int (*on_head)(void *ud, const bm_http1_head_t *head);
    /** n > 0 body bytes, decoded. `p` points into the fed data or into the parser. */
    int (*on_body)(void *ud, const char *p, size_t n);
    /** The message is complete; bm_http1_feed returns BM_HTTP1_DONE right after. */
    void (*on_complete)(void *ud);
} bm_http1_callbacks_t;

typedef enum {
    BM_HTTP1_MORE = 0,  /* every byte was consumed; the message is not complete yet */
    BM_HTTP1_DONE = 1,  /* a message completed; call bm_http1_next before feeding more */
    BM_HTTP1_ERROR = 2, /* the input is invalid: answer bm_http1_error_status and close */
} bm_http1_result_t;

typedef enum {
    BM_HTTP1_IDLE = 0,     /* no byte of the next message seen yet */
    BM_HTTP1_HEAD = 1,     /* inside a request head */
    BM_HTTP1_BODY = 2,     /* head done, reading the body */
    BM_HTTP1_COMPLETE = 3, /* a message completed, waiting for bm_http1_next */
    BM_HTTP1_FAILED = 4,   /* an error was reported; the parser accepts nothing more */
} bm_http1_phase_t;

/**
 * A new parser. `limits` may be NULL for the defaults; `cbs` may be NULL or have NULL
 * members. Raises http-parser's process-wide header limit (a global in the library) so
 * that ours always fire first; create the first parser before starting other threads.
 * NULL on allocation failure. Caller frees with bm_http1_free.
 */
bm_http1_t *bm_http1_new(const bm_http1_limits_t *limits, const bm_http1_callbacks_t *cbs,
                         void *ud);

/** Frees the parser and everything it owns. NULL is ignored. */
void bm_http1_free(bm_http1_t *p);

/**
 * Parses data[0..len). `*consumed` receives how many bytes were used: all of them for
 * BM_HTTP1_MORE; up to the end of the message for BM_HTTP1_DONE (the rest belongs to the
 * next request: feed it again after bm_http1_next); up to the offending byte for
 * BM_HTTP1_ERROR. In phases COMPLETE and FAILED nothing is consumed.
 */
bm_http1_result_t bm_http1_feed(bm_http1_t *p, const char *data, size_t len, size_t *consumed);

/**
 * After BM_HTTP1_DONE: forgets the message (its head, target and fields become invalid)
 * and prepares for the next one, keeping allocated memory for reuse.
 */
void bm_http1_next(bm_http1_t *p);

/** The current phase. */
bm_http1_phase_t bm_http1_phase(const bm_http1_t *p);

/**
 * The head of the current message, valid from the on_head callback until bm_http1_next
 * or bm_http1_free; NULL before the head is complete.
 */
const bm_http1_head_t *bm_http1_head(const bm_http1_t *p);

/** Body bytes delivered for the current message. */
uint64_t bm_http1_body_bytes(const bm_http1_t *p);

/**
 * How many heads this parser read without http-parser (the short way: a GET or HEAD in
 * HTTP/1.1 that came whole, see http1.c), for the tests that pin which heads take it.
 */
uint64_t bm_http1_short_heads(const bm_http1_t *p);

/** After BM_HTTP1_ERROR: the status to answer (400, 413, 414, 431, 501, 505, ...). */
int bm_http1_error_status(const bm_http1_t *p);

/** After BM_HTTP1_ERROR: a short static description for the error answer. */
const char *bm_http1_error_message(const bm_http1_t *p);

#endif /* BM_HTTP1_H */
