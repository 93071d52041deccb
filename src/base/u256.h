/* SPDX-License-Identifier: MIT */
/*
 * u256: 256-bit unsigned integers for block values.
 *
 * The Beacon API reports block values in Wei as decimal "Uint256" strings
 * (Eth-Execution-Payload-Value, Eth-Consensus-Block-Value, execution_payload_value,
 * consensus_block_value). Values above 2^63 and 2^64 happen on mainnet, so comparing them
 * as int64 or double would pick the wrong block. This module parses, compares, adds,
 * multiplies and divides by 64-bit factors (the builder_boost_factor rule) and formats back,
 * with every overflow reported instead of wrapped. Values are plain structs: no allocation.
 */
#ifndef BM_U256_H
#define BM_U256_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/** A 256-bit unsigned integer; w[0] holds the least significant 64 bits. */
typedef struct bm_u256 {
    uint64_t w[4];
} bm_u256_t;

/** Room for the decimal form of any value plus the NUL: 2^256-1 has 78 digits. */
#define BM_U256_DEC_MAX 79

/** The value v. */
bm_u256_t bm_u256_from_u64(uint64_t v);

/**
 * Parses the decimal string s[0..len) into *out. Accepts one or more ASCII digits (leading
 * zeros allowed) and nothing else: no sign, no whitespace, no "0x". Returns 0, or BM_EINVAL
 * for an empty string, a non-digit, or a value above 2^256-1 (*out is then untouched).
 */
int bm_u256_parse(const char *s, size_t len, bm_u256_t *out);

/** Like bm_u256_parse for a NUL-terminated string. */
int bm_u256_parse_z(const char *s, bm_u256_t *out);

/** -1, 0 or 1 as a is less than, equal to or greater than b. */
int bm_u256_cmp(const bm_u256_t *a, const bm_u256_t *b);

/** True when a is zero. */
bool bm_u256_is_zero(const bm_u256_t *a);

/** True when a fits in 64 bits; then *out (if not NULL) receives it. */
bool bm_u256_to_u64(const bm_u256_t *a, uint64_t *out);

/** *out = a + b. Returns 0, or BM_ETOOBIG when the sum exceeds 2^256-1 (*out untouched). */
int bm_u256_add(const bm_u256_t *a, const bm_u256_t *b, bm_u256_t *out);

/** *out = a - b. Returns 0, or BM_EINVAL when b > a (*out untouched). */
int bm_u256_sub(const bm_u256_t *a, const bm_u256_t *b, bm_u256_t *out);

/** *out = a * m. Returns 0, or BM_ETOOBIG when the product exceeds 2^256-1 (*out untouched). */
int bm_u256_mul_u64(const bm_u256_t *a, uint64_t m, bm_u256_t *out);

/**
 * *quot = a / d (rounded down) and, when rem is not NULL, *rem = a % d. Returns 0, or
 * BM_EINVAL when d is zero (outputs untouched). quot may alias a.
 */
int bm_u256_div_u64(const bm_u256_t *a, uint64_t d, bm_u256_t *quot, uint64_t *rem);

/**
 * Writes the decimal form of a (no leading zeros; "0" for zero) and a NUL into out, which
 * holds at least BM_U256_DEC_MAX bytes. Returns the number of digits.
 */
size_t bm_u256_format(const bm_u256_t *a, char out[BM_U256_DEC_MAX]);

/**
 * The builder_boost_factor rule of produceBlockV3/V4: the local (execution-payload) block is
 * preferred when `local >= boost * (builder / 100)`, integer division. A product above
 * 2^256-1 is larger than any local value, so the builder wins then. boost 0 always prefers
 * the local block; boost 100 compares the values (builder rounded down to a multiple of 100).
 */
bool bm_u256_boost_prefers_local(const bm_u256_t *local, const bm_u256_t *builder, uint64_t boost);

#endif /* BM_U256_H */
