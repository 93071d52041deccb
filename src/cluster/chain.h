/* SPDX-License-Identifier: MIT */
/*
 * chain: what beaconmux knows about the chain its nodes follow, read from one node's
 * /eth/v1/beacon/genesis and /eth/v1/config/spec: the slot clock, the fork schedule and
 * the duty due times. Also the comparison of two nodes' configurations on the keys that
 * must agree for them to be on the same network. Pure data and parsing; no I/O.
 */
#ifndef BM_CHAIN_H
#define BM_CHAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/clock.h"
#include "base/fork.h"

#define BM_FAR_FUTURE_EPOCH UINT64_MAX

/* Duties with a due time inside the slot. */
typedef enum bm_due {
    BM_DUE_ATTESTATION = 0,
    BM_DUE_AGGREGATE,
    BM_DUE_SYNC_MESSAGE,
    BM_DUE_CONTRIBUTION,
    BM_DUE_PAYLOAD_ATTESTATION, /* Gloas only */
    BM_DUE_COUNT
} bm_due_t;

typedef struct bm_chain_info {
    bool known; /* parsed from a node's genesis and spec */
    bm_slot_clock_t clock;
    uint8_t genesis_root[32];             /* genesis_validators_root */
    uint64_t fork_epoch[BM_FORK_NAMED];   /* BM_FAR_FUTURE_EPOCH when not scheduled */
    uint32_t due_bps[BM_DUE_COUNT];       /* before Gloas */
    uint32_t due_bps_gloas[BM_DUE_COUNT]; /* from Gloas */
} bm_chain_info_t;

/**
 * Parses the bodies of /eth/v1/beacon/genesis and /eth/v1/config/spec into `out`.
 * Missing due-time keys take the spec's defaults (1/3, 2/3 before Gloas; 1/4, 1/2, 3/4
 * from Gloas). Returns 0, or BM_EINVAL with `err` (may be NULL) saying what is missing.
 */
int bm_chain_parse(const char *genesis, size_t genesis_len, const char *spec, size_t spec_len,
                   bm_chain_info_t *out, char *err, size_t err_cap);

/** The fork active at `epoch`. */
bm_fork_t bm_chain_fork_at_epoch(const bm_chain_info_t *c, uint64_t epoch);

/** The fork active at `slot`. */
bm_fork_t bm_chain_fork_at_slot(const bm_chain_info_t *c, uint64_t slot);

/** Wall time (Unix ms) at which duty `d` is due in `slot`, by the fork of that slot. */
uint64_t bm_chain_due_ms(const bm_chain_info_t *c, uint64_t slot, bm_due_t d);

/**
 * Compares the spec keys two nodes must agree on (the genesis is compared by the caller):
 * slot constants,
 * fork versions and epochs, deposit chain id. A fork epoch one node has scheduled while
 * the other still reports FAR_FUTURE_EPOCH or lacks the key is not a disagreement (a
 * rolling upgrade); keys absent on one side are skipped. Returns true when compatible;
 * otherwise writes the first differing key into `why`.
 */
bool bm_chain_spec_compatible(const char *spec_a, size_t len_a, const char *spec_b, size_t len_b,
                              char *why, size_t why_cap);

#endif /* BM_CHAIN_H */
