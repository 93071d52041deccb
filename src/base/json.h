/* SPDX-License-Identifier: MIT */
/*
 * json: the JSON helpers the duty policies and the event stream need, over json-c 0.16.
 *
 * - bm_json_pick: a few fields of a small body read in one validating pass without a tree
 *   (the duty races read every node's answer; a json-c tree of one cost ~25k instructions).
 * - bm_json_parse: a body to a json_object, with a size guard and errors that say what
 *   and where. The text is first checked against RFC 8259 by our own scanner, because
 *   json-c on its own accepts NaN, raw control characters in strings, and silently clamps
 *   integers beyond 64 bits to INT64_MIN / UINT64_MAX, which would turn a lying node's
 *   huge number into a plausible one.
 * - Field access by JSON pointer (RFC 6901), with the Beacon API's quoted-decimal numbers
 *   ("12345") read as uint64 and overflow rejected.
 * - 0x-hex roots (Bytes32): parse, format, compare case-insensitively.
 * - Set-bit counts of hex SSZ Bitvectors and Bitlists (aggregation_bits), for picking the
 *   best aggregate.
 * - A canonical form (object keys sorted, no whitespace) and its keyed 64-bit hash
 *   (SipHash-2-4), so that the same event from two nodes dedups whatever their key order.
 * - bm_json_compact: one-line JSON for an SSE `data:` line.
 *
 * The pure text functions (hex, bits, compact) need no json-c object and allocate only
 * into the caller's bm_str_t.
 */
#ifndef BM_JSON_H
#define BM_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

struct json_object;

/** bm_json_parse's size limit when the caller passes 0: 64 MiB (a Fulu block with blobs
 * in JSON is a few MiB). */
#define BM_JSON_DEFAULT_MAX (64u * 1024u * 1024u)

/** Deepest nesting of arrays and objects accepted (Beacon API bodies stay below 10). */
#define BM_JSON_MAX_DEPTH 64

/** Where and why a text was refused. */
typedef struct bm_json_error {
    size_t offset; /* byte offset of the problem in the input */
    char msg[96];  /* a short English description, NUL-terminated */
} bm_json_error_t;

/**
 * Parses p[0..len) as one JSON value (RFC 8259: any value at top level, surrounding
 * whitespace allowed, nothing else after it). On success *out is a new json_object that
 * the caller releases with json_object_put (a JSON `null` document gives *out == NULL).
 * Returns 0; BM_ETOOBIG when len exceeds max_len (0: BM_JSON_DEFAULT_MAX); BM_EINVAL for an
 * empty or malformed text, nesting deeper than BM_JSON_MAX_DEPTH, or an integer literal
 * outside [-2^63, 2^64-1]; BM_ENOMEM. err (may be NULL) says why.
 */
int bm_json_parse(const void *p, size_t len, size_t max_len, struct json_object **out,
                  bm_json_error_t *err);

/** bm_json_parse over a buffer's contents (the buffer is only read). */
int bm_json_parse_buf(const bm_buf_t *b, size_t max_len, struct json_object **out,
                      bm_json_error_t *err);

/** Most fields one bm_json_pick call reads. */
#define BM_JSON_PICK_MAX 16

/** Deepest pointer bm_json_pick follows ("/data/source/epoch" has three segments). */
#define BM_JSON_PICK_MAX_SEGMENTS 8

/** One field bm_json_pick reads: the caller sets `ptr`; the rest is its answer. */
typedef struct bm_json_pick {
    const char *ptr; /* a JSON pointer of object member names ("/data/slot"): no "~", no
                      * segment empty or all digits (json-c would read those as array
                      * indexes); pick never looks into an array */
    const char *at;  /* the value's text, into the document (a string's without its
                      * quotes); NULL when the field is absent */
    size_t len;      /* of `at` (a container's: 0, its text is not kept) */
    char kind;       /* '"' string, '0' number, 't' 'f' 'n' literal, '{' '[' container */
} bm_json_pick_t;

/**
 * Reads the fields `f[0..n)` of the JSON text p[0..len) without building a tree: the text
 * is validated exactly as bm_json_parse validates it, and each field gets the value
 * bm_json_get would find in the tree bm_json_parse builds (a member named twice: the last
 * one, as json-c keeps it; a member under an object named twice: only under the last one).
 * Returns 0 (fields set); 1 when the text contains a backslash (an escape: the text is not
 * the decoded string, so the caller reads it with bm_json_parse instead); BM_ETOOBIG,
 * BM_EINVAL (malformed, or a bad pointer, or more than BM_JSON_PICK_MAX fields) as
 * bm_json_parse. Allocates nothing; the fields point into p.
 */
int bm_json_pick(const void *p, size_t len, size_t max_len, bm_json_pick_t *f, size_t n);

/** bm_json_get_u64 for a picked field: 0, BM_ENOTFOUND (absent) or BM_EINVAL. */
int bm_json_pick_u64(const bm_json_pick_t *f, uint64_t *out);

/** bm_json_get_root for a picked field: 0, BM_ENOTFOUND or BM_EINVAL. */
int bm_json_pick_root(const bm_json_pick_t *f, uint8_t out[32]);

/** bm_json_get_bool for a picked field: 0, BM_ENOTFOUND or BM_EINVAL. */
int bm_json_pick_bool(const bm_json_pick_t *f, bool *out);

/**
 * The value at JSON pointer `ptr` ("" is the whole document, "/data/slot", "/data/0").
 * Borrowed from obj; NULL when absent or when the value is JSON null.
 */
struct json_object *bm_json_get(struct json_object *obj, const char *ptr);

/** The string at `ptr`, borrowed from obj; NULL when absent or not a string. */
const char *bm_json_get_str(struct json_object *obj, const char *ptr);

/**
 * The unsigned integer at `ptr`: a quoted decimal ("12345", as the Beacon API writes
 * every number) or a plain JSON integer. Returns 0; BM_ENOTFOUND when absent; BM_EINVAL
 * for anything else (null, a negative, a fraction, a non-digit, an empty string, or a value
 * above 2^64-1). *out is written only on success.
 */
int bm_json_get_u64(struct json_object *obj, const char *ptr, uint64_t *out);

/** The boolean at `ptr`. Returns 0, BM_ENOTFOUND, or BM_EINVAL when not a JSON boolean. */
int bm_json_get_bool(struct json_object *obj, const char *ptr, bool *out);

/** The 0x-hex Bytes32 at `ptr` (a root). Returns 0, BM_ENOTFOUND or BM_EINVAL. */
int bm_json_get_root(struct json_object *obj, const char *ptr, uint8_t out[32]);

/**
 * Parses a decimal uint64 from s[0..len): one or more ASCII digits, nothing else.
 * Returns 0, or BM_EINVAL (empty, a non-digit, above 2^64-1).
 */
int bm_json_parse_u64(const char *s, size_t len, uint64_t *out);

/** The value of one hex digit (either case), or -1 when `c` is not one. */
int bm_hexval(char c);

/** Length of a formatted root: "0x" + 64 hex digits. */
#define BM_ROOT_HEX_LEN 66

/**
 * Parses "0x" followed by exactly 64 hex digits (either case) into 32 bytes. Returns 0, or
 * BM_EINVAL (NULL, no "0x", wrong length, a non-hex digit). out is written only on success.
 */
int bm_hex_to_root(const char *s, uint8_t out[32]);

/** Length of a root's short form for logs: "0x" + its first 8 hex digits. */
#define BM_ROOT_SHORT_LEN 10

/** Writes a root's short form ("0x" + its first 4 bytes in hex) and a NUL into out;
 *  returns out, for use inside a log call. */
const char *bm_root_short(const uint8_t root[32], char out[BM_ROOT_SHORT_LEN + 1]);

/** Writes "0x" + 64 lowercase hex digits and a NUL into out. */
void bm_root_to_hex(const uint8_t root[32], char out[BM_ROOT_HEX_LEN + 1]);

/** True when a and b are both valid roots (see bm_hex_to_root) with the same bytes. */
bool bm_hex_root_eq(const char *a, const char *b);

/**
 * Decodes "0x" + an even number of hex digits from s[0..slen) into out[0..cap).
 * *outlen gets the byte count. Returns 0, BM_EINVAL (malformed), or BM_ETOOBIG (does not fit
 * in cap). On failure out[0..cap) may have been written.
 */
int bm_hex_decode(const char *s, size_t slen, uint8_t *out, size_t cap, size_t *outlen);

/**
 * Set bits of a hex SSZ Bitvector ("0x" + bytes; every bit counts), e.g. a sync committee
 * contribution's aggregation_bits or an attestation's committee_bits: "0x0f01" -> 5.
 * Returns 0, or BM_EINVAL for an empty, odd-length or non-hex string or one without "0x".
 */
int bm_json_hex_bits_set(const char *hex, size_t *count);

/**
 * Set bits of a hex SSZ Bitlist, e.g. an attestation's aggregation_bits. The highest set
 * bit of the last byte is the list's length delimiter, not a participant, and is not
 * counted: "0x0f01" -> 4 (length 8). *len_bits (may be NULL) gets the list's length.
 * Returns 0, or BM_EINVAL for malformed hex or a last byte of zero (no delimiter).
 */
int bm_json_hex_bitlist_bits_set(const char *hex, size_t *count, size_t *len_bits);

/**
 * Appends the canonical form of obj to out: no whitespace, object keys sorted by their
 * bytes at every depth, strings re-escaped one way (so "\u0041" and "A" agree), integers in
 * plain decimal; other numbers keep the text they were parsed from (1.5 and 1.50 differ).
 * Returns 0, BM_EINVAL (nesting deeper than 256) or BM_ENOMEM.
 */
int bm_json_canonical_string(struct json_object *obj, bm_str_t *out);

/**
 * The 64-bit SipHash-2-4 of obj's canonical form under `key` (16 bytes; NULL: a fixed
 * built-in key). Two documents that differ only in key order or whitespace hash equal.
 * Use a random key per process where a node could otherwise craft collisions to suppress
 * another node's events. Returns 0, BM_EINVAL or BM_ENOMEM.
 */
int bm_json_canonical_hash(struct json_object *obj, const uint8_t key[16], uint64_t *out);

/** SipHash-2-4 of p[0..n) under a 16-byte key. */
uint64_t bm_json_siphash(const uint8_t key[16], const void *p, size_t n);

/**
 * Appends the compact form of the JSON text[0..len) to out: all whitespace outside strings
 * removed, everything else byte for byte (key order, number spelling, escapes). Since JSON
 * strings cannot hold a raw CR or LF, the result is one line, safe after `data: ` in an
 * event stream. The text is validated as bm_json_parse does; on error nothing is appended
 * and BM_EINVAL is returned with err (may be NULL) filled. BM_ENOMEM when out failed.
 */
int bm_json_compact(const char *text, size_t len, bm_str_t *out, bm_json_error_t *err);

#endif /* BM_JSON_H */
