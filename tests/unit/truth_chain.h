/* SPDX-License-Identifier: MIT */
/*
 * truth_chain: the synthetic chain ("truth") of the head tracker's tests (test_head,
 * test_health): a block is a number whose root is R(id), its parent and slot declared by
 * the test (blk, linear), and times are offsets into a slot (T). The test's setup points
 * TRUTH at its chain. Static functions only; each test binary includes this once.
 */
#ifndef BM_TEST_TRUTH_CHAIN_H
#define BM_TEST_TRUTH_CHAIN_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define GENESIS 1700000000000ull
#define SLOT 12000u
#define SPE 8u
#define MAXB 4096

typedef struct root {
    uint8_t b[32];
} root_t;

/* Block `id` of the synthetic truth: 0xB0, the id in bytes 1..4, 0x5A last. */
static inline root_t R(unsigned id)
{
    root_t r;
    memset(&r, 0, sizeof r);
    r.b[0] = 0xB0;
    r.b[1] = (uint8_t)(id >> 24);
    r.b[2] = (uint8_t)(id >> 16);
    r.b[3] = (uint8_t)(id >> 8);
    r.b[4] = (uint8_t)id;
    r.b[31] = 0x5A;
    return r;
}

/* Whether `r` is the root of a truth block (its id in *id). */
static inline bool is_truth(const uint8_t r[32], unsigned *id)
{
    if (r[0] != 0xB0 || r[31] != 0x5A)
        return false;
    *id = (unsigned)r[1] << 24 | (unsigned)r[2] << 16 | (unsigned)r[3] << 8 | r[4];
    return *id < MAXB;
}

/* Unix ms `off_ms` from the start of `slot`. */
static inline uint64_t T(uint64_t slot, int64_t off_ms)
{
    return (uint64_t)((int64_t)(GENESIS + slot * SLOT) + off_ms);
}

/* The declared blocks, by id. */
typedef struct truth {
    bool exists[MAXB];
    unsigned parent[MAXB];
    uint64_t slot[MAXB];
} truth_t;

static truth_t *TRUTH; /* the running test's chain */

/* Defines truth block `id` at `slot` with parent `parent`. */
static inline void blk(unsigned id, unsigned parent, uint64_t slot)
{
    TRUTH->exists[id] = true;
    TRUTH->parent[id] = parent;
    TRUTH->slot[id] = slot;
}

/* Canonical blocks: id = slot, parent = slot - 1. */
static inline void linear(unsigned from, unsigned to)
{
    for (unsigned s = from; s <= to; s++)
        blk(s, s - 1, s);
}

#endif /* BM_TEST_TRUTH_CHAIN_H */
