/* SPDX-License-Identifier: MIT */
/*
 * hash: SHA-256 and the seeded derivations built on it. Every "random" thing in beaconsim
 * (block roots, skips, jitter, committee assignments, block values, participation bits)
 * is a hash of the run's seed and the coordinates of the thing, so a run is reproducible
 * from its --seed and two nodes asking about the same block always agree. SHA-256 is
 * implemented here (FIPS 180-4) so the sim does not depend on a crypto library; it also
 * gives hash_tree_root for the few small SSZ containers whose roots the API exposes.
 */
#ifndef BS_HASH_H
#define BS_HASH_H

#include <stddef.h>
#include <stdint.h>

/** A 32-byte root (block, state, body, checkpoint). */
typedef struct bs_root {
    uint8_t b[32];
} bs_root_t;

/** SHA-256 of p[0..n) into out. */
void bs_sha256(const void *p, size_t n, uint8_t out[32]);

/** SHA-256 of the 64-byte concatenation a || b (one Merkle step). */
void bs_sha256_pair(const uint8_t a[32], const uint8_t b[32], uint8_t out[32]);

/** Domain tags keep derivations for different purposes apart. */
enum {
    BS_TAG_ROOT = 1,
    BS_TAG_STATE = 2,
    BS_TAG_BODY = 3,
    BS_TAG_SKIP = 4,
    BS_TAG_JITTER = 5,
    BS_TAG_PUBKEY = 6,
    BS_TAG_PROPOSER = 7,
    BS_TAG_ATTESTER = 8,
    BS_TAG_SYNC = 9,
    BS_TAG_PTC = 10,
    BS_TAG_VALUE = 11,
    BS_TAG_BITS = 12,
    BS_TAG_GENESIS = 13,
    BS_TAG_EXEC = 14,
    BS_TAG_SIG = 15,
    BS_TAG_PRODUCED = 16,
    BS_TAG_PAYLOAD = 17,
    BS_TAG_RNG = 18,
    BS_TAG_PEER = 19,
    BS_TAG_WRONG = 20, /* the wrong checkpoints of bad-source / bad-target */
};

/** sha256(LE64(seed) || LE32(tag) || LE64(a) || LE64(b) || LE64(c)). */
bs_root_t bs_hash(uint64_t seed, uint32_t tag, uint64_t a, uint64_t b, uint64_t c);

/** Like bs_hash with a root mixed in (for derivations that depend on a chain view). */
bs_root_t bs_hash_root(uint64_t seed, uint32_t tag, const bs_root_t *r, uint64_t a, uint64_t b);

/** The first 8 bytes of bs_hash as a little-endian integer. */
uint64_t bs_hash_u64(uint64_t seed, uint32_t tag, uint64_t a, uint64_t b, uint64_t c);

/** A deterministic number in [0, 1) from bs_hash. */
double bs_hash_unit(uint64_t seed, uint32_t tag, uint64_t a, uint64_t b, uint64_t c);

/** splitmix64 step: a fast non-cryptographic generator for per-request coin flips. */
uint64_t bs_rng_next(uint64_t *state);

/** A number in [0, 1) from the generator. */
double bs_rng_unit(uint64_t *state);

/** True when two roots are equal. */
int bs_root_eq(const bs_root_t *a, const bs_root_t *b);

/** Parses "0x" + 64 hex digits. Returns 0 or BM_EINVAL. */
int bs_root_parse(const char *s, size_t n, bs_root_t *out);

/** Writes "0x" + 64 lowercase hex digits and a NUL into out[67]. */
void bs_root_hex(const bs_root_t *r, char out[67]);

#endif /* BS_HASH_H */
