/* SPDX-License-Identifier: MIT */
/*
 * ssz: reads the few fields the duty policies need from SSZ (application/octet-stream)
 * Beacon API bodies, by offset, without a full SSZ decoder.
 *
 * The race engine must know a produced block's slot and parent root, an attestation's
 * head vote, or how many bits an aggregate carries, whatever encoding the node answered
 * with. A full decoder would be thousands of lines per fork; the fields we need sit at
 * fixed positions or behind one or two 4-byte offsets (docs/ssz.md gives the layouts; the
 * numbers follow the consensus specs' container definitions). Every offset that is followed
 * is validated as the SSZ spec requires (the first offset equals the fixed-part size,
 * offsets never decrease and never point past the end), so a truncated or inconsistent
 * body yields BM_EINVAL and never an out-of-bounds read.
 *
 * The bytes alone cannot tell a BeaconBlock from a BlockContents: the caller names the
 * payload (kind) and passes the response or request headers (fork, blinded, included).
 * All functions are pure: they read `buf` and write only their output struct.
 */
#ifndef BM_SSZ_H
#define BM_SSZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/fork.h"

/** Which API payload a block body is; it decides the layout together with the headers. */
typedef enum bm_ssz_block_kind {
    /* Response of GET /eth/v3/validator/blocks/{slot} (phase0..fulu). `blinded` comes from
     * Eth-Execution-Payload-Blinded: BlindedBeaconBlock; else deneb..fulu answer a
     * BlockContents {block, kzg_proofs, blobs} and older forks a BeaconBlock. */
    BM_SSZ_BLOCK_PRODUCE_V3 = 1,
    /* Response of GET /eth/v4/validator/blocks/{slot} (gloas and later). `included` comes
     * from Eth-Execution-Payload-Included: BlockContents {block,
     * execution_payload_envelope, kzg_proofs, blobs}; else a BeaconBlock. */
    BM_SSZ_BLOCK_PRODUCE_V4,
    /* Body of POST /eth/v2/beacon/blocks (`blinded` false: SignedBlockContents in
     * deneb..fulu, else SignedBeaconBlock) or POST /eth/v2/beacon/blinded_blocks (`blinded`
     * true: SignedBlindedBeaconBlock, bellatrix..fulu). */
    BM_SSZ_BLOCK_PUBLISH,
    /* A bare SignedBeaconBlock or SignedBlindedBeaconBlock of any fork (getBlockV2,
     * getBlindedBlock responses). */
    BM_SSZ_BLOCK_SIGNED,
} bm_ssz_block_kind_t;

/** What bm_ssz_block_info reads from a block. */
typedef struct bm_ssz_block_info {
    uint64_t slot;
    uint64_t proposer_index;
    uint8_t parent_root[32];
    uint8_t state_root[32];
    size_t block_offset; /* where the (Blinded)BeaconBlock starts in buf */
    size_t block_len;    /* its length: up to the next offset, or to the end of buf */
} bm_ssz_block_info_t;

/**
 * Reads slot, proposer_index, parent_root and state_root of the block inside buf[0..len).
 * `fork` is the Eth-Consensus-Version header; `blinded` and `included` are the
 * Eth-Execution-Payload-Blinded / -Included headers (each ignored where it does not apply).
 * Returns 0, or BM_EINVAL when the fork name is bad, the fork/kind/flag combination does not
 * exist (a V3 answer for gloas, a V4 answer before gloas, a blinded block before bellatrix or
 * from gloas on), or the bytes are inconsistent: truncated, a first offset that is not the
 * fixed-part size, decreasing offsets, offsets past the end, or a block body offset that is
 * not 84. *out is written only on success.
 */
int bm_ssz_block_info(const uint8_t *buf, size_t len, const char *fork, bool blinded, bool included,
                      int kind, bm_ssz_block_info_t *out);

/** AttestationData (128 bytes, fixed size). */
typedef struct bm_ssz_attestation_data {
    uint64_t slot;
    uint64_t index;
    uint8_t beacon_block_root[32];
    uint64_t source_epoch;
    uint8_t source_root[32];
    uint64_t target_epoch;
    uint8_t target_root[32];
} bm_ssz_attestation_data_t;

/** Size of an SSZ AttestationData. */
#define BM_SSZ_ATTESTATION_DATA_LEN 128

/**
 * Reads an AttestationData (produceAttestationData SSZ answer). Returns 0, or BM_EINVAL
 * unless len is exactly 128.
 */
int bm_ssz_attestation_data(const uint8_t *buf, size_t len, bm_ssz_attestation_data_t *out);

/** PayloadAttestationData (Gloas, 42 bytes, fixed size). */
typedef struct bm_ssz_payload_attestation_data {
    uint8_t beacon_block_root[32];
    uint64_t slot;
    bool payload_present;
    bool blob_data_available;
} bm_ssz_payload_attestation_data_t;

/** Size of an SSZ PayloadAttestationData. */
#define BM_SSZ_PAYLOAD_ATTESTATION_DATA_LEN 42

/**
 * Reads a PayloadAttestationData (payload_attestation_data SSZ answer). Returns 0, or
 * BM_EINVAL unless len is exactly 42 and both booleans are 0x00 or 0x01.
 */
int bm_ssz_payload_attestation_data(const uint8_t *buf, size_t len,
                                    bm_ssz_payload_attestation_data_t *out);

/** What bm_ssz_attestation_info reads from an (aggregate) Attestation. */
typedef struct bm_ssz_attestation_info {
    size_t bits_set;         /* participants: set bits of aggregation_bits, delimiter excluded */
    size_t bits_len;         /* the Bitlist's length in bits (position of the delimiter) */
    uint64_t committee_bits; /* Electra+: the Bitvector[64] committee_bits; 0 before */
    bm_ssz_attestation_data_t data;
} bm_ssz_attestation_info_t;

/**
 * Reads an Attestation (aggregate_attestation SSZ answer). The layout follows the fork:
 * phase0..deneb {aggregation_bits (offset 228), data, signature}; electra and later
 * {aggregation_bits (offset 236), data, signature, committee_bits}. aggregation_bits is an
 * SSZ Bitlist: its last byte must be non-zero, and the highest set bit of that byte is the
 * length delimiter, which is not counted. The Bitlist may hold at most 2048 bits
 * (phase0 MAX_VALIDATORS_PER_COMMITTEE) or 2048 * 64 bits (electra, times
 * MAX_COMMITTEES_PER_SLOT). Returns 0 or BM_EINVAL.
 */
int bm_ssz_attestation_info(const uint8_t *buf, size_t len, const char *fork,
                            bm_ssz_attestation_info_t *out);

/** SyncCommitteeContribution (altair and later, 160 bytes, fixed size). */
typedef struct bm_ssz_sync_contribution {
    uint64_t slot;
    uint8_t beacon_block_root[32];
    uint64_t subcommittee_index;
    size_t bits_set; /* set bits of aggregation_bits, a Bitvector[128] (512 / 4 subnets) */
} bm_ssz_sync_contribution_t;

/** Size of an SSZ SyncCommitteeContribution: 8 + 32 + 8 + 16 + 96. */
#define BM_SSZ_SYNC_CONTRIBUTION_LEN 160

/** Reads a SyncCommitteeContribution. Returns 0, or BM_EINVAL unless len is 160. */
int bm_ssz_sync_contribution(const uint8_t *buf, size_t len, bm_ssz_sync_contribution_t *out);

/** Which Gloas payload-envelope object a body is. */
typedef enum bm_ssz_envelope_kind {
    /* ExecutionPayloadEnvelope (GET validator/execution_payload_envelopes/{slot}/{root}). */
    BM_SSZ_ENVELOPE = 1,
    /* SignedExecutionPayloadEnvelope (POST beacon/execution_payload_envelopes with
     * Eth-Blob-Data-Included: false; GET beacon/execution_payload_envelopes/{id}). */
    BM_SSZ_ENVELOPE_SIGNED,
    /* SignedExecutionPayloadEnvelopeContents (POST with Eth-Blob-Data-Included: true). */
    BM_SSZ_ENVELOPE_SIGNED_CONTENTS,
    /* The execution_payload_envelope inside a Gloas BlockContents (produceBlockV4 with
     * Eth-Execution-Payload-Included: true). */
    BM_SSZ_ENVELOPE_IN_BLOCK_CONTENTS,
} bm_ssz_envelope_kind_t;

/** What bm_ssz_envelope_info reads from an execution payload envelope. */
typedef struct bm_ssz_envelope_info {
    uint64_t builder_index;
    uint8_t beacon_block_root[32];
    uint8_t parent_beacon_block_root[32];
} bm_ssz_envelope_info_t;

/**
 * Reads builder_index, beacon_block_root and parent_beacon_block_root of the execution
 * payload envelope in buf[0..len), following and validating every offset on the way.
 * Returns 0, or BM_EINVAL for a bad kind or inconsistent bytes.
 */
int bm_ssz_envelope_info(const uint8_t *buf, size_t len, int kind, bm_ssz_envelope_info_t *out);

/** Little-endian readers; the caller guarantees 4 or 8 readable bytes. */
static inline uint32_t bm_ssz_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t bm_ssz_u64(const uint8_t *p)
{
    return (uint64_t)bm_ssz_u32(p) | (uint64_t)bm_ssz_u32(p + 4) << 32;
}

#endif /* BM_SSZ_H */
