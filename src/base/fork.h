/* SPDX-License-Identifier: MIT */
/*
 * fork: the consensus forks by name and order. Comparisons like `fork >= BM_FORK_DENEB`
 * are meaningful. Names arrive in Eth-Consensus-Version headers, in JSON "version" fields
 * and as spec keys (ALTAIR_FORK_EPOCH, ...).
 */
#ifndef BM_FORK_H
#define BM_FORK_H

typedef enum bm_fork {
    BM_FORK_PHASE0 = 0,
    BM_FORK_ALTAIR,
    BM_FORK_BELLATRIX,
    BM_FORK_CAPELLA,
    BM_FORK_DENEB,
    BM_FORK_ELECTRA,
    BM_FORK_FULU,
    BM_FORK_GLOAS,
    /* The fork after Gloas ("heze"), and any later fork name we do not know yet. SSZ
     * layouts are read like Gloas: BeaconBlock has had the same first fields since phase0,
     * and a layout that did change fails the offset checks instead of being misread. */
    BM_FORK_HEZE,
    BM_FORK_FUTURE,
} bm_fork_t;

/** Forks with a name and a spec epoch key (phase0 .. heze). */
#define BM_FORK_NAMED (BM_FORK_HEZE + 1)

/**
 * Parses a fork name: "phase0" ... "gloas", "heze", case-insensitively. Any other name made
 * of 1..32 ASCII letters and digits is taken as a future fork (BM_FORK_FUTURE). Returns 0,
 * or BM_EINVAL for NULL, an empty string or other characters.
 */
int bm_fork_parse(const char *name, bm_fork_t *out);

/** The lowercase name of a fork ("future" for BM_FORK_FUTURE, "?" for a bad value). */
const char *bm_fork_name(bm_fork_t fork);

#endif /* BM_FORK_H */
