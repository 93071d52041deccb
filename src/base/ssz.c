/* SPDX-License-Identifier: MIT */
/*
 * ssz: offset-following readers for the Beacon API's SSZ bodies.
 *
 * Every reader works on a region [start, end) of the caller's buffer: a container's fixed
 * part is read only after checking that the region holds it, and an offset is followed
 * only after checking it against the SSZ rules, so the functions never read outside
 * buf[0..len). The layouts and numbers come from SSZ-LAYOUT.md; docs/ssz.md explains the
 * choices.
 */
#include "base/ssz.h"

#include <string.h>
#include <strings.h>

#include "base/err.h"

/* BeaconBlock / BlindedBeaconBlock: slot, proposer_index, parent_root, state_root, off(body) */
#define BLOCK_FIXED 84
/* Signed*: off(message), signature[96] */
#define SIGNED_FIXED 100
/* ExecutionPayloadEnvelope: off(payload), off(execution_requests), builder_index, 2 roots */
#define ENVELOPE_FIXED 80
#define ATT_PHASE0_FIXED 228
#define ATT_ELECTRA_FIXED 236
/* MAX_VALIDATORS_PER_COMMITTEE and, from electra, times MAX_COMMITTEES_PER_SLOT (mainnet;
 * the minimal preset is smaller, so these are upper bounds for both). */
#define ATT_PHASE0_MAX_BITS 2048u
#define ATT_ELECTRA_MAX_BITS (2048u * 64u)
#define SYNC_BITS_OFF 48
#define SYNC_BITS_BYTES 16

/*
 * The offset table of a container whose fixed part is only `n` offsets (the API's
 * *Contents containers): checks that the region [start, end) holds the table, that the
 * first offset is the table's size, that offsets never decrease and stay inside the
 * region. Writes absolute positions to abs[0..n).
 */
static int offset_table(const uint8_t *buf, size_t start, size_t end, size_t n, size_t *abs)
{
    size_t fixed = 4 * n;
    if (end < start || end - start < fixed)
        return BM_EINVAL;
    size_t prev = 0;
    for (size_t i = 0; i < n; i++) {
        size_t off = bm_ssz_u32(buf + start + 4 * i);
        if (i == 0 && off != fixed)
            return BM_EINVAL;
        if (off < prev || off > end - start)
            return BM_EINVAL;
        prev = off;
        abs[i] = start + off;
    }
    return 0;
}

/* A Signed{BeaconBlock,BlindedBeaconBlock,ExecutionPayloadEnvelope} in [start, end): the
 * message offset must be 100; returns the message's start in *msg. */
static int signed_message(const uint8_t *buf, size_t start, size_t end, size_t *msg)
{
    if (end < start || end - start < SIGNED_FIXED)
        return BM_EINVAL;
    if (bm_ssz_u32(buf + start) != SIGNED_FIXED)
        return BM_EINVAL;
    *msg = start + SIGNED_FIXED;
    return 0;
}

/* A (Blinded)BeaconBlock in [start, end). */
static int read_block(const uint8_t *buf, size_t start, size_t end, bm_ssz_block_info_t *out)
{
    if (end < start || end - start < BLOCK_FIXED)
        return BM_EINVAL;
    const uint8_t *p = buf + start;
    if (bm_ssz_u32(p + 80) != BLOCK_FIXED)
        return BM_EINVAL;
    out->slot = bm_ssz_u64(p);
    out->proposer_index = bm_ssz_u64(p + 8);
    memcpy(out->parent_root, p + 16, 32);
    memcpy(out->state_root, p + 48, 32);
    out->block_offset = start;
    out->block_len = end - start;
    return 0;
}

/* Where a message stands in a body: the whole body, or field `at` of a leading offset table
 * of `fields` offsets (the API's *Contents containers); inside a Signed* wrapper when
 * `wrapped`. Blocks and envelopes come in the same wrappings, so one walk finds both. */
typedef struct {
    uint8_t fields, at;
    bool wrapped;
} layout_t;

static const layout_t L_WHOLE = {0, 0, false};     /* BeaconBlock, ExecutionPayloadEnvelope */
static const layout_t L_CONTENTS3 = {3, 0, false}; /* BlockContents {block, kzg_proofs, blobs} */
/* Gloas BlockContents {block, envelope, kzg_proofs, blobs}: its block, its envelope */
static const layout_t L_CONTENTS4 = {4, 0, false};
static const layout_t L_CONTENTS4_SECOND = {4, 1, false};
static const layout_t L_SIGNED = {0, 0, true}; /* Signed{BeaconBlock,ExecutionPayloadEnvelope} */
/* SignedBlockContents {signed_block, kzg_proofs, blobs} (and the envelope's likewise) */
static const layout_t L_SIGNED_CONTENTS = {3, 0, true};

/* The message's region [*start, *end) of buf[0..len) under layout l. */
static int message_region(const uint8_t *buf, size_t len, layout_t l, size_t *start, size_t *end)
{
    size_t abs[4];
    *start = 0;
    *end = len;
    if (l.fields) {
        int rc = offset_table(buf, 0, len, l.fields, abs);
        if (rc != 0)
            return rc;
        *start = abs[l.at];
        *end = abs[l.at + 1];
    }
    return l.wrapped ? signed_message(buf, *start, *end, start) : 0;
}

static bool has_blobs_in_block(bm_fork_t f)
{
    return f >= BM_FORK_DENEB && f <= BM_FORK_FULU;
}

static bool has_blinded(bm_fork_t f)
{
    return f >= BM_FORK_BELLATRIX && f <= BM_FORK_FULU;
}

static int choose_layout(bm_fork_t f, bool blinded, bool included, int kind, layout_t *out)
{
    switch (kind) {
    case BM_SSZ_BLOCK_PRODUCE_V3:
    case BM_SSZ_BLOCK_PUBLISH:
        if (kind == BM_SSZ_BLOCK_PRODUCE_V3 && f >= BM_FORK_GLOAS)
            return BM_EINVAL; /* produceBlockV3 is not defined from gloas on */
        if (blinded && !has_blinded(f))
            return BM_EINVAL;
        /* a full block of a fork with blobs in it comes in BlockContents; what is published
         * is the same, signed */
        *out = !blinded && has_blobs_in_block(f) ? L_CONTENTS3 : L_WHOLE;
        out->wrapped = kind == BM_SSZ_BLOCK_PUBLISH;
        return 0;
    case BM_SSZ_BLOCK_PRODUCE_V4:
        if (f < BM_FORK_GLOAS)
            return BM_EINVAL;
        *out = included ? L_CONTENTS4 : L_WHOLE;
        return 0;
    case BM_SSZ_BLOCK_SIGNED:
        *out = L_SIGNED;
        return 0;
    default:
        return BM_EINVAL;
    }
}

int bm_ssz_block_info(const uint8_t *buf, size_t len, const char *fork, bool blinded, bool included,
                      int kind, bm_ssz_block_info_t *out)
{
    bm_fork_t f;
    layout_t layout;
    if (!buf && len)
        return BM_EINVAL;
    if (bm_fork_parse(fork, &f) != 0 || choose_layout(f, blinded, included, kind, &layout))
        return BM_EINVAL;
    size_t start, end;
    bm_ssz_block_info_t r;
    int rc = message_region(buf, len, layout, &start, &end);
    if (rc == 0)
        rc = read_block(buf, start, end, &r);
    if (rc == 0)
        *out = r;
    return rc;
}

static void read_attestation_data(const uint8_t *p, bm_ssz_attestation_data_t *d)
{
    d->slot = bm_ssz_u64(p);
    d->index = bm_ssz_u64(p + 8);
    memcpy(d->beacon_block_root, p + 16, 32);
    d->source_epoch = bm_ssz_u64(p + 48);
    memcpy(d->source_root, p + 56, 32);
    d->target_epoch = bm_ssz_u64(p + 88);
    memcpy(d->target_root, p + 96, 32);
}

int bm_ssz_attestation_data(const uint8_t *buf, size_t len, bm_ssz_attestation_data_t *out)
{
    if (!buf || len != BM_SSZ_ATTESTATION_DATA_LEN)
        return BM_EINVAL;
    read_attestation_data(buf, out);
    return 0;
}

int bm_ssz_payload_attestation_data(const uint8_t *buf, size_t len,
                                    bm_ssz_payload_attestation_data_t *out)
{
    if (!buf || len != BM_SSZ_PAYLOAD_ATTESTATION_DATA_LEN)
        return BM_EINVAL;
    if (buf[40] > 1 || buf[41] > 1)
        return BM_EINVAL; /* an SSZ boolean is exactly 0x00 or 0x01 */
    memcpy(out->beacon_block_root, buf, 32);
    out->slot = bm_ssz_u64(buf + 32);
    out->payload_present = buf[40] == 1;
    out->blob_data_available = buf[41] == 1;
    return 0;
}

static size_t popcount_bytes(const uint8_t *p, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += (size_t)__builtin_popcount(p[i]);
    return c;
}

/* An SSZ Bitlist in p[0..n): the highest set bit of the last byte marks its length. */
static int bitlist_count(const uint8_t *p, size_t n, size_t max_bits, size_t *set, size_t *len)
{
    if (n == 0 || p[n - 1] == 0)
        return BM_EINVAL;
    int top = 31 - __builtin_clz(p[n - 1]);
    size_t bits = (n - 1) * 8 + (size_t)top;
    if (bits > max_bits)
        return BM_EINVAL;
    *set = popcount_bytes(p, n) - 1;
    *len = bits;
    return 0;
}

int bm_ssz_attestation_info(const uint8_t *buf, size_t len, const char *fork,
                            bm_ssz_attestation_info_t *out)
{
    bm_fork_t f;
    if ((!buf && len) || bm_fork_parse(fork, &f) != 0)
        return BM_EINVAL;
    bool electra = f >= BM_FORK_ELECTRA;
    size_t fixed = electra ? ATT_ELECTRA_FIXED : ATT_PHASE0_FIXED;
    size_t max_bits = electra ? ATT_ELECTRA_MAX_BITS : ATT_PHASE0_MAX_BITS;
    if (len < fixed || bm_ssz_u32(buf) != fixed)
        return BM_EINVAL;
    bm_ssz_attestation_info_t r;
    /* aggregation_bits is the only variable field, so it runs to the end of the body. */
    if (bitlist_count(buf + fixed, len - fixed, max_bits, &r.bits_set, &r.bits_len) != 0)
        return BM_EINVAL;
    read_attestation_data(buf + 4, &r.data);
    r.committee_bits = electra ? bm_ssz_u64(buf + 228) : 0;
    *out = r;
    return 0;
}

int bm_ssz_sync_contribution(const uint8_t *buf, size_t len, bm_ssz_sync_contribution_t *out)
{
    if (!buf || len != BM_SSZ_SYNC_CONTRIBUTION_LEN)
        return BM_EINVAL;
    out->slot = bm_ssz_u64(buf);
    memcpy(out->beacon_block_root, buf + 8, 32);
    out->subcommittee_index = bm_ssz_u64(buf + 40);
    out->bits_set = popcount_bytes(buf + SYNC_BITS_OFF, SYNC_BITS_BYTES);
    return 0;
}

/* An ExecutionPayloadEnvelope in [start, end). */
static int read_envelope(const uint8_t *buf, size_t start, size_t end, bm_ssz_envelope_info_t *out)
{
    if (end < start || end - start < ENVELOPE_FIXED)
        return BM_EINVAL;
    const uint8_t *p = buf + start;
    size_t off_payload = bm_ssz_u32(p), off_requests = bm_ssz_u32(p + 4);
    if (off_payload != ENVELOPE_FIXED || off_requests < off_payload || off_requests > end - start)
        return BM_EINVAL;
    out->builder_index = bm_ssz_u64(p + 8);
    memcpy(out->beacon_block_root, p + 16, 32);
    memcpy(out->parent_beacon_block_root, p + 48, 32);
    return 0;
}

int bm_ssz_envelope_info(const uint8_t *buf, size_t len, int kind, bm_ssz_envelope_info_t *out)
{
    if (!buf && len)
        return BM_EINVAL;
    layout_t layout;
    switch (kind) {
    case BM_SSZ_ENVELOPE:
        layout = L_WHOLE;
        break;
    case BM_SSZ_ENVELOPE_SIGNED:
        layout = L_SIGNED;
        break;
    case BM_SSZ_ENVELOPE_SIGNED_CONTENTS:
        layout = L_SIGNED_CONTENTS;
        break;
    case BM_SSZ_ENVELOPE_IN_BLOCK_CONTENTS:
        layout = L_CONTENTS4_SECOND;
        break;
    default:
        return BM_EINVAL;
    }
    size_t start, end;
    bm_ssz_envelope_info_t r;
    int rc = message_region(buf, len, layout, &start, &end);
    if (rc == 0)
        rc = read_envelope(buf, start, end, &r);
    if (rc == 0)
        *out = r;
    return rc;
}
