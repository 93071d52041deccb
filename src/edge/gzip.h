/* SPDX-License-Identifier: MIT */
/*
 * gzip: compression of bodies with zlib, and the content-coding negotiation of a client's
 * Accept-Encoding. A cached body is compressed once, when it is stored, and served as is
 * to every client that accepts gzip; nothing here is done per hit. Pure: no I/O.
 */
#ifndef BM_GZIP_H
#define BM_GZIP_H

#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"

/**
 * The gzip form of p[0..n) at `level` (1..9), as a new buffer (caller owns it); NULL when
 * it would not be smaller than the input or on no memory.
 */
bm_buf_t *bm_gzip_compress(const void *p, size_t n, int level);

/**
 * Inflates the gzip data p[0..n) into a new buffer (caller owns it), at most `max` bytes;
 * NULL for data that is not gzip, truncated, or larger than `max`.
 */
bm_buf_t *bm_gzip_inflate(const void *p, size_t n, size_t max);

/**
 * Whether an Accept-Encoding field value (NULL: absent) accepts gzip: "gzip" or "x-gzip"
 * or "*" with a q-value above 0, unless "gzip;q=0" refuses it. Case-insensitive.
 */
bool bm_gzip_accepted(const char *accept_encoding);

#endif /* BM_GZIP_H */
