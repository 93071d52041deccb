/* SPDX-License-Identifier: MIT */
/*
 * blocks: JSON and SSZ encodings of the objects beaconsim serves that have a body:
 * BeaconBlock (fulu and gloas bodies), ExecutionPayloadEnvelope, and the small fixed
 * containers (AttestationData, PayloadAttestationData, Attestation). The SSZ writer is
 * this project's second, independent implementation of SSZ-LAYOUT.md (beaconmux's reader
 * is the first), so a mistake in either shows up as a disagreement in tests.
 */
#ifndef BS_BLOCKS_H
#define BS_BLOCKS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "chain.h"
#include "node.h"

/** What a block is made of (everything else is zero or empty). */
typedef struct bs_block_desc {
    bs_fork_t fork;
    uint64_t slot;
    uint64_t proposer_index;
    bs_root_t parent_root;
    bs_root_t state_root;
    uint8_t randao_reveal[96];
    uint8_t graffiti[32];
    bs_root_t exec_parent_hash; /* execution parent */
    bs_root_t exec_block_hash;
    bs_root_t prev_randao;
    uint64_t block_number;
    uint64_t timestamp;
    uint64_t bid_value; /* gloas bid value (Gwei) */
    uint32_t tx_bytes;  /* one execution transaction of this many bytes (0: none) */
    uint64_t tx_seed;   /* its bytes' seed */
    bool blinded;       /* fulu: a BlindedBeaconBlock (execution_payload_header), JSON only */
} bs_block_desc_t;

/** Fills a block description for `id` as proposed on the chain (or by node `node`). */
void bs_block_describe(bs_chain_t *c, bs_block_id_t id, uint32_t proposer, bs_block_desc_t *d);

/** BeaconBlock (BlindedBeaconBlock when d->blinded) as JSON / SSZ (appended to s). */
void bs_block_json(bm_str_t *s, const bs_block_desc_t *d);
void bs_block_ssz(bm_str_t *s, const bs_block_desc_t *d);

/** SignedBeaconBlock SSZ: offset 100, signature, block. */
void bs_signed_block_ssz(bm_str_t *s, const bs_block_desc_t *d, const uint8_t sig[96]);

/**
 * BlockContents SSZ of a produce answer: fulu {block, kzg_proofs, blobs} (3 offsets) when
 * env_root is NULL; gloas {block, execution_payload_envelope, kzg_proofs, blobs} (4
 * offsets) with the envelope of block env_root otherwise. No blobs.
 */
void bs_block_contents_ssz(bm_str_t *s, const bs_block_desc_t *d, const bs_root_t *env_root);

/** PayloadAttestationData SSZ (42 bytes). */
void bs_payload_att_data_ssz(bm_str_t *s, const bs_root_t *root, uint64_t slot, bool present,
                             bool blobs);

/** ExecutionPayloadEnvelope (gloas) for a block, JSON / SSZ. */
void bs_envelope_json(bm_str_t *s, const bs_block_desc_t *d, const bs_root_t *block_root);
void bs_envelope_ssz(bm_str_t *s, const bs_block_desc_t *d, const bs_root_t *block_root);

/** AttestationData JSON object / 128-byte SSZ. */
void bs_att_data_json(bm_str_t *s, const bs_att_data_t *d);
void bs_att_data_ssz(bm_str_t *s, const bs_att_data_t *d);

/** Electra Attestation with `bits` (a bitlist of nbits, delimiter added), JSON / SSZ. */
void bs_attestation_json(bm_str_t *s, const bs_att_data_t *d, const uint8_t *bits, uint32_t nbits,
                         const uint8_t sig[96]);
void bs_attestation_ssz(bm_str_t *s, const bs_att_data_t *d, const uint8_t *bits, uint32_t nbits,
                        const uint8_t sig[96]);

/** Appends n bytes as 0x-hex in quotes. */
void bs_json_hex(bm_str_t *s, const void *p, size_t n);

/** Little-endian helpers for the SSZ writer. */
void bs_ssz_u64(bm_str_t *s, uint64_t v);
void bs_ssz_u32(bm_str_t *s, uint32_t v);

/** A deterministic 96-byte signature-looking value. */
void bs_fake_sig(uint64_t seed, uint64_t a, uint64_t b, uint8_t out[96]);

#endif /* BS_BLOCKS_H */
