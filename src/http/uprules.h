/* SPDX-License-Identifier: MIT */
/*
 * uprules: the rules every upstream request and response follows, whichever transport
 * carries it (the native HTTP/1.1 client for http:// nodes, libcurl for https://). Which
 * URLs are accepted, which request header fields go out, which interim (1xx) responses
 * are skipped, how large a response head may be, how a failure is described and logged
 * without the URL's secret. Both transports call these, so a caller of bm_upstream cannot
 * tell them apart by what is sent or by how an answer is judged.
 *
 * Internal to src/http/ (upstream.c, upstream_curl.c, h1client.c, h1resp.c).
 */
#ifndef BM_UPRULES_H
#define BM_UPRULES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/hdrs.h"
#include "base/log.h"

/**
 * Largest response head (status line, fields, final empty line) of one response; an
 * interim (1xx) head counts on its own. A larger one fails the transfer with BM_EPROTO:
 * no beacon node sends kilobytes of fields, and a node that does is broken or hostile.
 */
#define BM_UPRULES_MAX_HEAD_BYTES (64 * 1024)

/** Largest request method accepted ("GET", "POST", ...). */
#define BM_UPRULES_METHOD_MAX 32

/** The parts of a request URL; every pointer points into the URL string. */
typedef struct bm_uprules_url {
    bool https;
    const char *userinfo; /* between "//" and '@', NULL when none */
    size_t userinfo_len;
    const char *hostport; /* host[:port] (IPv6 literals in brackets) */
    size_t hostport_len;
    size_t origin_len;  /* bytes of "scheme://[userinfo@]host[:port]" */
    const char *target; /* the rest: "/path?query#fragment", possibly "" or "?q" */
} bm_uprules_url_t;

/**
 * Splits a complete request URL: http:// or https:// (any case), a non-empty host,
 * printable ASCII only. False when it is not one (bm_upstream_start then returns NULL).
 * The port and the host's characters are judged later by the transport (reported through
 * on_done as BM_EINVAL or BM_ECONNREFUSED).
 */
bool bm_uprules_parse_url(const char *url, bm_uprules_url_t *out);

/** True for a non-empty RFC 9110 token (methods, field names). */
bool bm_uprules_token(const char *p, size_t n);

/** True for a field value that may be sent: no CR, LF or NUL. */
bool bm_uprules_value(const char *p, size_t n);

/** True for a byte a response field value may hold (RFC 9110 5.5: visible, SP, HTAB,
 *  obs-text); a control byte fails the response with BM_EPROTO on both transports. */
static inline bool bm_uprules_value_byte_ok(unsigned char c)
{
    return c == '\t' || (c >= 0x20 && c != 0x7f);
}

/** What bm_uprules_fields saw among the fields it let through. */
#define BM_UPRULES_SAW_CONTENT_TYPE 1u
#define BM_UPRULES_SAW_ACCEPT 2u

/** Receives one field that goes upstream (borrowed for the call). */
typedef void (*bm_uprules_emit_fn)(void *ctx, const char *name, size_t name_len, const char *value,
                                   size_t value_len);

/**
 * Passes the fields of `h` that may go upstream to `emit`, in order: hop-by-hop fields
 * (bm_header_is_hop_by_hop), fields named in a Connection field of `h`, Accept-Encoding
 * (the transports ask for identity: policies read bodies) and, when `drop_auth` (the URL
 * carries credentials, which win), Authorization are left out. ORs BM_UPRULES_SAW_* into
 * *saw. Returns 0, or BM_EINVAL when a field name is not a token or a value holds CR, LF
 * or NUL (then the request must not start; emit may have run for earlier fields).
 */
int bm_uprules_fields(const bm_hdrs_t *h, bool drop_auth, bm_uprules_emit_fn emit, void *ctx,
                      unsigned *saw);

/**
 * bm_uprules_fields for the caller's fields `h` of a request that also carries the node's
 * own fields `node` (the operator's upstreams[].headers; may be NULL): besides what
 * bm_uprules_fields leaves out, a field `node` also names is left out, so the operator's
 * value replaces the client's (an X-Api-Key of the client never reaches a hosted node
 * before the operator's), and so are a client's forwarding fields (X-Forwarded-For,
 * Forwarded, X-Real-IP): a node never takes a client's word for where a request came from.
 */
int bm_uprules_caller_fields(const bm_hdrs_t *h, const bm_hdrs_t *node, bool drop_auth,
                             bm_uprules_emit_fn emit, void *ctx, unsigned *saw);

/** True for a field that says where a request came from (X-Forwarded-For, Forwarded,
 *  X-Real-IP): never passed on from a client. */
bool bm_uprules_is_forwarding(const char *name, size_t len);

/** Text bytes of every field of `h` as "Name: value\r\n": an upper bound for a head. */
size_t bm_uprules_fields_bytes(const bm_hdrs_t *h);

/**
 * What to do with an interim (1xx) response: true to skip it and wait for the final one
 * (100 Continue, 102 Processing, 103 Early Hints: RFC 9110 asks a client to parse such
 * heads even unasked). Any other 1xx, 101 Switching Protocols above all (we never ask to
 * switch), fails the transfer with BM_EPROTO: the node broke the exchange.
 */
bool bm_uprules_interim_skipped(int status);

/**
 * The body length the fields `h` of a final response head announce, judged as the native
 * client's parser (http-parser) judges it: *len is the Content-Length, or -1 without one.
 * BM_EPROTO (the node broke the exchange; *why a static description) when a value is not
 * 1 to 19 decimal digits or is past 2^63 - 1, when Content-Length is repeated (even with
 * the same value) or comes with Transfer-Encoding. libcurl reads an overflowing length as
 * "until the close" and "12x" as 12; a length that cannot be must never turn into an
 * answer that looks complete.
 */
int bm_uprules_content_length(const bm_hdrs_t *h, int64_t *len, const char **why);

/**
 * The secret of a URL's user info, to be hidden in messages: the password, or a lone
 * user name (usually an API token). NULL when there is none or on allocation failure
 * (*oom tells which). Caller frees.
 */
char *bm_uprules_secret(const char *userinfo, size_t len, bool *oom);

/** Copies `in` into out[0..cap) with every occurrence of `secret` replaced by "***" and
 *  trailing CR/LF dropped. `secret` may be NULL. */
void bm_uprules_mask(char *out, size_t cap, const char *in, const char *secret);

/**
 * Logs a failed transfer at debug level, rate-limited by `lim`: method, the URL with its
 * credentials masked (bm_url_mask), the error and its detail. Does nothing when debug
 * logging is off.
 */
void bm_uprules_log_failure(bm_log_limit_t *lim, const char *method, const char *url, int err,
                            const char *detail);

/**
 * True when bytes from the peer (a node, or a client of our server) wait unread in socket
 * `fd` (FIONREAD). An idle deadline judged while they wait would blame the peer for our own
 * lateness: see docs/upstream.md, "Idle means the node was silent".
 */
bool bm_uprules_socket_has_input(int fd);

#endif /* BM_UPRULES_H */
