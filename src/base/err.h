/* SPDX-License-Identifier: MIT */
/*
 * err: the project's error codes. Every function that can fail returns 0 or a negative
 * BM_E* code; library codes (libuv, libcurl, json-c) are translated in the module that
 * wraps the library, so callers only ever see these.
 */
#ifndef BM_ERR_H
#define BM_ERR_H

enum {
    BM_OK = 0,
    BM_EINVAL = -1,       /* bad argument or malformed input */
    BM_ENOMEM = -2,       /* allocation failed */
    BM_ETOOBIG = -3,      /* a configured size limit was exceeded */
    BM_ETIMEDOUT = -4,    /* a timer expired before the operation finished */
    BM_ECONNREFUSED = -5, /* could not connect (refused, unreachable, DNS) */
    BM_ECONNRESET = -6,   /* the peer closed or reset the connection mid-exchange */
    BM_ECANCELED = -7,    /* the operation was cancelled by its owner */
    BM_EPROTO = -8,       /* the peer broke the protocol (HTTP, SSE, TLS) */
    BM_EIO = -9,          /* any other I/O failure */
    BM_ENOTFOUND = -10,   /* no such key, route or entry */
    BM_ECLOSED = -11,     /* the object is closing or closed */
    BM_EUNAVAIL = -12,    /* nothing usable to serve the request */
    BM_ETLS = -13,        /* TLS handshake or certificate failure */
};

/** A static, human-readable description of a BM_E* code (never NULL). */
const char *bm_strerror(int err);

/** Translates a negative libuv error code into a BM_E* code. */
int bm_err_from_uv(int uv_err);

#endif /* BM_ERR_H */
