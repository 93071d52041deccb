/* SPDX-License-Identifier: MIT */
/*
 * canon: canonical JSON, for consensus reads. Two beacon nodes of different clients often
 * write the same data differently: key order, whitespace, escapes ("\u0041" or "A"), number
 * spelling (1.0, 1, 10e-1) and the case of hex digits ("0xAB" or "0xab"). Comparing bytes or
 * byte hashes would call that a disagreement. The canonical form removes exactly those
 * differences and nothing else:
 *   - no whitespace; object members sorted by their key's bytes (after unescaping, and a
 *     hex key in lower case, as it is written);
 *   - strings re-escaped one way (only '"', '\\' and control characters are escaped);
 *     a string that is "0x" followed by hex digits is written in lower case;
 *   - numbers as their exact decimal value: sign, significant digits, exponent ("1.50" and
 *     "15e-1" both become "15e-1"; "-0" is "0"); no precision is lost, big integers included.
 * Quoted decimal numbers (the Beacon API's "12345") stay strings, compared as written.
 * SSZ bodies are compared as bytes (bm_canon_equal with `ssz`). Pure text functions, no I/O.
 */
#ifndef BM_CANON_H
#define BM_CANON_H

#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"

/** Deepest nesting accepted. */
#define BM_CANON_MAX_DEPTH 64

/**
 * Appends the canonical form of the JSON text p[0..n) to out. Returns 0; BM_EINVAL for text
 * that is not exactly one JSON value (RFC 8259) or nests deeper than BM_CANON_MAX_DEPTH;
 * BM_ENOMEM. On error, out may hold part of the form.
 */
int bm_canon_json(const char *p, size_t n, bm_str_t *out);

/**
 * True when a and b hold the same data: with `ssz`, the same bytes; else the same canonical
 * JSON. Malformed JSON only equals the very same bytes.
 */
bool bm_canon_equal(const char *a, size_t alen, const char *b, size_t blen, bool ssz);

#endif /* BM_CANON_H */
