/* SPDX-License-Identifier: MIT */
/*
 * flags: the top-level `finalized` and `execution_optimistic` booleans of a Beacon API JSON
 * answer, found without parsing the (possibly megabytes of) data, and rewritten when a
 * cached answer is served after what is known changed (its block became finalized). Pure.
 */
#ifndef BM_FLAGS_H
#define BM_FLAGS_H

#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"

/** Where the two flags' values are in a body; -1 when absent (or not a boolean). */
typedef struct bm_flags {
    long finalized_off, optimistic_off; /* offset of the 't' or 'f' of the value */
    bool finalized, optimistic;         /* their values */
} bm_flags_t;

/**
 * Finds the flags among the top-level members of the JSON object p[0..n) (nested members
 * of the same names are skipped). Returns false when p is not an object whose top level
 * could be walked; the offsets are then -1.
 */
bool bm_flags_scan(const char *p, size_t n, bm_flags_t *out);

/**
 * A copy of p[0..n) with `finalized` set to `fin` and `execution_optimistic` to `opt`
 * where they are present (a value < 0 keeps it). NULL when nothing changes (or on no
 * memory): serve the original.
 */
bm_buf_t *bm_flags_patch(const char *p, size_t n, const bm_flags_t *f, int fin, int opt);

#endif /* BM_FLAGS_H */
