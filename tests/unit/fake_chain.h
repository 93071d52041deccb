/* SPDX-License-Identifier: MIT */
/*
 * fake_chain: a synthetic chain for the tests of the policies that judge by the head
 * (test_hint, test_attest, test_produce): roots numbered by id, chain information with
 * chosen fork epochs and the spec's due times, and a head tracker fed with head events by
 * hand, whose header requests are answered at once from the synthetic chain (or held
 * until the test releases them). No loop and no clock: every input carries its time.
 */
#ifndef BM_TEST_FAKE_CHAIN_H
#define BM_TEST_FAKE_CHAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cluster/chain.h"
#include "cluster/head.h"

#define FAKE_MAX_BLOCKS 256
#define FAKE_MAX_HELD 16

/** Root number `id`: 0xB0, the id (2 bytes, big-endian), zeros, 0x5A. */
void fake_root(unsigned id, uint8_t out[32]);

/** The same as "0x..." hex (67 bytes with the NUL). */
void fake_root_hex(unsigned id, char out[67]);

/** Chain information: every fork up to Deneb from genesis, Electra and Fulu at
 *  `electra_epoch`, Gloas at `gloas_epoch` (BM_FAR_FUTURE_EPOCH: none); the spec's due
 *  times. */
void fake_chain_info(bm_chain_info_t *c, uint64_t genesis_ms, uint32_t slot_ms, uint32_t spe,
                     uint64_t electra_epoch, uint64_t gloas_epoch);

/** Chain information whose slot `slot` is half gone now (bm_clock_now_ms); every fork up
 *  to `fork` active from genesis, the others never; the spec's due times. */
void fake_chain_now(bm_chain_info_t *c, uint32_t slot_ms, uint32_t spe, uint64_t slot,
                    bm_fork_t fork);

/** A head tracker fed by hand; its header requests are answered from the declared blocks. */
typedef struct fake_chain {
    bm_head_t *t;
    bm_chain_info_t info;
    uint64_t now;                /* the time inputs are given at */
    bool known[FAKE_MAX_BLOCKS]; /* block id -> declared */
    unsigned parent[FAKE_MAX_BLOCKS];
    uint64_t slot[FAKE_MAX_BLOCKS];
    bool defer; /* hold header requests until fake_chain_release */
    struct {
        uint8_t root[32];
        size_t node;
    } held[FAKE_MAX_HELD];
    int n_held;
} fake_chain_t;

/** A tracker for `n` nodes over `info`, its clock set at `now`. */
void fake_chain_init(fake_chain_t *c, size_t n, const bm_chain_info_t *info, uint64_t now);

/** Frees the tracker. */
void fake_chain_dispose(fake_chain_t *c);

/** Declares block `id` at `slot` on `parent`. */
void fake_block(fake_chain_t *c, unsigned id, uint64_t slot, unsigned parent);

/** Node `node` announces block `id` as its head at `now` (payload status as given). */
void fake_head(fake_chain_t *c, size_t node, unsigned id, uint64_t now,
               bm_payload_status_t payload);

/** Answers the header requests held while `defer` was set (and stops holding). */
void fake_chain_release(fake_chain_t *c, uint64_t now);

/** The cluster head's root id (-1 without one). */
int fake_cluster_id(const fake_chain_t *c);

#endif /* BM_TEST_FAKE_CHAIN_H */
