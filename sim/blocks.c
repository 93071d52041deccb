/* SPDX-License-Identifier: MIT */
/*
 * blocks: JSON and SSZ encodings of blocks, envelopes and attestations. See blocks.h.
 * Field order follows consensus-specs (SSZ) and the beacon-APIs YAML (JSON).
 */
#include "blocks.h"

#include <string.h>

#define GRAFFITI "beaconsim"
#define EXTRA_DATA "beaconsim"
#define GAS_LIMIT 36000000ull
#define BASE_FEE 7ull

void bs_ssz_u64(bm_str_t *s, uint64_t v)
{
    uint8_t b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    bm_str_append(s, b, 8);
}

void bs_ssz_u32(bm_str_t *s, uint32_t v)
{
    uint8_t b[4];
    for (int i = 0; i < 4; i++)
        b[i] = (uint8_t)(v >> (8 * i));
    bm_str_append(s, b, 4);
}

static void zeros(bm_str_t *s, size_t n)
{
    static const uint8_t z[256];
    while (n) {
        size_t k = n < sizeof z ? n : sizeof z;
        bm_str_append(s, z, k);
        n -= k;
    }
}

void bs_json_hex(bm_str_t *s, const void *p, size_t n)
{
    bm_str_putc(s, '"');
    bm_str_hex(s, p, n);
    bm_str_putc(s, '"');
}

static void json_zero_hex(bm_str_t *s, size_t n)
{
    bm_str_puts(s, "\"0x");
    for (size_t i = 0; i < n; i++)
        bm_str_puts(s, "00");
    bm_str_putc(s, '"');
}

void bs_fake_sig(uint64_t seed, uint64_t a, uint64_t b, uint8_t out[96])
{
    for (int i = 0; i < 3; i++) {
        bs_root_t r = bs_hash(seed, BS_TAG_SIG, a, b, (uint64_t)i);
        memcpy(out + 32 * i, r.b, 32);
    }
    out[0] = (uint8_t)(0x80 | (out[0] & 0x1f));
}

void bs_block_describe(bs_chain_t *c, bs_block_id_t id, uint32_t proposer, bs_block_desc_t *d)
{
    const bs_chain_cfg_t *cfg = bs_chain_config(c);
    memset(d, 0, sizeof *d);
    d->fork = bs_chain_fork_at(c, id.slot);
    d->slot = id.slot;
    d->proposer_index = proposer;
    bs_block_id_t p;
    if (bs_chain_parent(c, id, &p)) {
        d->parent_root = bs_chain_root(c, p);
        d->exec_parent_hash = bs_chain_exec_hash(c, p);
    }
    d->state_root = bs_chain_state_root(c, id);
    bs_fake_sig(cfg->seed, id.branch, id.slot, d->randao_reveal);
    memcpy(d->graffiti, GRAFFITI, strlen(GRAFFITI));
    d->exec_block_hash = bs_chain_exec_hash(c, id);
    d->prev_randao = bs_hash(cfg->seed, BS_TAG_RNG, id.branch, id.slot, 9);
    d->block_number = id.slot;
    d->timestamp = (cfg->genesis_ms + id.slot * cfg->slot_ms) / 1000;
    d->bid_value = 0;
    d->tx_bytes = cfg->tx_bytes;
    d->tx_seed = cfg->seed ^ (id.slot * 0x9e3779b97f4a7c15ull) ^ id.branch;
}

/* The transaction's bytes: a quarter seeded noise, the rest a counting pattern, so that it
 * compresses about as well as real calldata does (2-4x). */
static uint8_t tx_byte(const bs_block_desc_t *d, uint32_t i)
{
    if (i % 4)
        return (uint8_t)(i / 4);
    uint64_t x = d->tx_seed + i * 0xbf58476d1ce4e5b9ull;
    x ^= x >> 31;
    x *= 0x94d049bb133111ebull;
    return (uint8_t)(x >> 56);
}

static void tx_json(bm_str_t *s, const bs_block_desc_t *d)
{
    static const char hex[] = "0123456789abcdef";
    bm_str_puts(s, "\"transactions\":[");
    if (d->tx_bytes) {
        bm_str_reserve(s, 2 * (size_t)d->tx_bytes + 8);
        bm_str_puts(s, "\"0x");
        for (uint32_t i = 0; i < d->tx_bytes; i++) {
            uint8_t b = tx_byte(d, i);
            char two[2] = {hex[b >> 4], hex[b & 15]};
            bm_str_append(s, two, 2);
        }
        bm_str_putc(s, '"');
    }
    bm_str_putc(s, ']');
}

/* ---- execution payload ---------------------------------------------------------------- */

static void payload_json(bm_str_t *s, const bs_block_desc_t *d)
{
    bm_str_puts(s, "{\"parent_hash\":");
    bs_json_hex(s, d->exec_parent_hash.b, 32);
    bm_str_puts(s, ",\"fee_recipient\":");
    json_zero_hex(s, 20);
    bm_str_puts(s, ",\"state_root\":");
    bs_json_hex(s, d->state_root.b, 32);
    bm_str_puts(s, ",\"receipts_root\":");
    json_zero_hex(s, 32);
    bm_str_puts(s, ",\"logs_bloom\":");
    json_zero_hex(s, 256);
    bm_str_puts(s, ",\"prev_randao\":");
    bs_json_hex(s, d->prev_randao.b, 32);
    bm_str_printf(s,
                  ",\"block_number\":\"%llu\",\"gas_limit\":\"%llu\",\"gas_used\":\"0\","
                  "\"timestamp\":\"%llu\",\"extra_data\":",
                  (unsigned long long)d->block_number, GAS_LIMIT, (unsigned long long)d->timestamp);
    bs_json_hex(s, EXTRA_DATA, strlen(EXTRA_DATA));
    bm_str_printf(s, ",\"base_fee_per_gas\":\"%llu\",\"block_hash\":", BASE_FEE);
    bs_json_hex(s, d->exec_block_hash.b, 32);
    if (d->blinded) { /* the header's roots of the empty lists (the sim computes no tree
                       * roots: the execution block hash stands in) */
        bm_str_puts(s, ",\"transactions_root\":");
        bs_json_hex(s, d->exec_block_hash.b, 32);
        bm_str_puts(s, ",\"withdrawals_root\":");
        bs_json_hex(s, d->exec_block_hash.b, 32);
        bm_str_puts(s, ",\"blob_gas_used\":\"0\",\"excess_blob_gas\":\"0\"");
    } else {
        bm_str_putc(s, ',');
        tx_json(s, d);
        bm_str_puts(s, ",\"withdrawals\":[],\"blob_gas_used\":\"0\",\"excess_blob_gas\":\"0\"");
    }
    if (d->fork == BS_FORK_GLOAS)
        bm_str_printf(s, ",\"block_access_list\":\"0x\",\"slot_number\":\"%llu\"",
                      (unsigned long long)d->slot);
    bm_str_putc(s, '}');
}

static void payload_ssz(bm_str_t *s, const bs_block_desc_t *d)
{
    bool gloas = d->fork == BS_FORK_GLOAS;
    uint32_t fixed = gloas ? 540 : 528;
    uint32_t extra = (uint32_t)strlen(EXTRA_DATA);
    bm_str_append(s, d->exec_parent_hash.b, 32);
    zeros(s, 20); /* fee_recipient */
    bm_str_append(s, d->state_root.b, 32);
    zeros(s, 32);  /* receipts_root */
    zeros(s, 256); /* logs_bloom */
    bm_str_append(s, d->prev_randao.b, 32);
    bs_ssz_u64(s, d->block_number);
    bs_ssz_u64(s, GAS_LIMIT);
    bs_ssz_u64(s, 0); /* gas_used */
    bs_ssz_u64(s, d->timestamp);
    bs_ssz_u32(s, fixed); /* extra_data */
    uint8_t fee[32] = {BASE_FEE};
    bm_str_append(s, fee, 32);
    bm_str_append(s, d->exec_block_hash.b, 32);
    uint32_t txs = d->tx_bytes ? 4 + d->tx_bytes : 0; /* one offset, then the bytes */
    bs_ssz_u32(s, fixed + extra);                     /* transactions */
    bs_ssz_u32(s, fixed + extra + txs);               /* withdrawals */
    bs_ssz_u64(s, 0);                                 /* blob_gas_used */
    bs_ssz_u64(s, 0);                                 /* excess_blob_gas */
    if (gloas) {
        bs_ssz_u32(s, fixed + extra + txs); /* block_access_list */
        bs_ssz_u64(s, d->slot);
    }
    bm_str_append(s, EXTRA_DATA, extra);
    if (d->tx_bytes) {
        bs_ssz_u32(s, 4);
        for (uint32_t i = 0; i < d->tx_bytes; i++) {
            uint8_t b = tx_byte(d, i);
            bm_str_append(s, &b, 1);
        }
    }
}

static void requests_json(bm_str_t *s)
{
    bm_str_puts(s, "{\"deposits\":[],\"withdrawals\":[],\"consolidations\":[]}");
}

static void requests_ssz(bm_str_t *s)
{
    bs_ssz_u32(s, 12);
    bs_ssz_u32(s, 12);
    bs_ssz_u32(s, 12);
}

/* ---- bid (gloas) ------------------------------------------------------------------------ */

static void bid_json(bm_str_t *s, const bs_block_desc_t *d)
{
    bm_str_puts(s, "{\"message\":{\"parent_block_hash\":");
    bs_json_hex(s, d->exec_parent_hash.b, 32);
    bm_str_puts(s, ",\"parent_block_root\":");
    bs_json_hex(s, d->parent_root.b, 32);
    bm_str_puts(s, ",\"block_hash\":");
    bs_json_hex(s, d->exec_block_hash.b, 32);
    bm_str_puts(s, ",\"prev_randao\":");
    bs_json_hex(s, d->prev_randao.b, 32);
    bm_str_puts(s, ",\"fee_recipient\":");
    json_zero_hex(s, 20);
    bm_str_printf(s,
                  ",\"gas_limit\":\"%llu\",\"builder_index\":\"18446744073709551615\","
                  "\"slot\":\"%llu\",\"value\":\"%llu\",\"execution_payment\":\"0\","
                  "\"blob_kzg_commitments\":[],\"execution_requests_root\":",
                  GAS_LIMIT, (unsigned long long)d->slot, (unsigned long long)d->bid_value);
    json_zero_hex(s, 32);
    bm_str_puts(s, "},\"signature\":");
    json_zero_hex(s, 96);
    bm_str_putc(s, '}');
}

static void bid_ssz(bm_str_t *s, const bs_block_desc_t *d)
{
    bs_ssz_u32(s, 100);
    zeros(s, 96);
    bm_str_append(s, d->exec_parent_hash.b, 32);
    bm_str_append(s, d->parent_root.b, 32);
    bm_str_append(s, d->exec_block_hash.b, 32);
    bm_str_append(s, d->prev_randao.b, 32);
    zeros(s, 20);
    bs_ssz_u64(s, GAS_LIMIT);
    bs_ssz_u64(s, UINT64_MAX); /* BUILDER_INDEX_SELF_BUILD */
    bs_ssz_u64(s, d->slot);
    bs_ssz_u64(s, d->bid_value);
    bs_ssz_u64(s, 0);
    bs_ssz_u32(s, 224); /* blob_kzg_commitments, empty */
    zeros(s, 32);
}

/* ---- block ------------------------------------------------------------------------------ */

static void body_common_json(bm_str_t *s, const bs_block_desc_t *d)
{
    bm_str_puts(s, "{\"randao_reveal\":");
    bs_json_hex(s, d->randao_reveal, 96);
    bm_str_puts(s, ",\"eth1_data\":{\"deposit_root\":");
    json_zero_hex(s, 32);
    bm_str_puts(s, ",\"deposit_count\":\"0\",\"block_hash\":");
    json_zero_hex(s, 32);
    bm_str_puts(s, "},\"graffiti\":");
    bs_json_hex(s, d->graffiti, 32);
    bm_str_puts(s, ",\"proposer_slashings\":[],\"attester_slashings\":[],\"attestations\":[],"
                   "\"deposits\":[],\"voluntary_exits\":[],\"sync_aggregate\":"
                   "{\"sync_committee_bits\":");
    json_zero_hex(s, 64);
    bm_str_puts(s, ",\"sync_committee_signature\":\"0xc0");
    for (int i = 1; i < 96; i++)
        bm_str_puts(s, "00");
    bm_str_puts(s, "\"}");
}

void bs_block_json(bm_str_t *s, const bs_block_desc_t *d)
{
    bm_str_printf(s, "{\"slot\":\"%llu\",\"proposer_index\":\"%llu\",\"parent_root\":",
                  (unsigned long long)d->slot, (unsigned long long)d->proposer_index);
    bs_json_hex(s, d->parent_root.b, 32);
    bm_str_puts(s, ",\"state_root\":");
    bs_json_hex(s, d->state_root.b, 32);
    bm_str_puts(s, ",\"body\":");
    body_common_json(s, d);
    if (d->fork == BS_FORK_GLOAS) {
        bm_str_puts(s, ",\"bls_to_execution_changes\":[],\"signed_execution_payload_bid\":");
        bid_json(s, d);
        bm_str_puts(s, ",\"payload_attestations\":[],\"parent_execution_requests\":");
        requests_json(s);
    } else {
        bm_str_puts(s, d->blinded ? ",\"execution_payload_header\":" : ",\"execution_payload\":");
        payload_json(s, d);
        bm_str_puts(s, ",\"bls_to_execution_changes\":[],\"blob_kzg_commitments\":[],"
                       "\"execution_requests\":");
        requests_json(s);
    }
    bm_str_puts(s, "}}");
}

static void body_common_ssz_fixed(bm_str_t *s, const bs_block_desc_t *d, uint32_t fixed)
{
    bm_str_append(s, d->randao_reveal, 96);
    zeros(s, 32);     /* eth1 deposit_root */
    bs_ssz_u64(s, 0); /* deposit_count */
    zeros(s, 32);     /* eth1 block_hash */
    bm_str_append(s, d->graffiti, 32);
    for (int i = 0; i < 5; i++) /* five empty operation lists */
        bs_ssz_u32(s, fixed);
    zeros(s, 64); /* sync_committee_bits */
    uint8_t inf[96] = {0xc0};
    bm_str_append(s, inf, 96);
}

void bs_block_ssz(bm_str_t *s, const bs_block_desc_t *d)
{
    bs_ssz_u64(s, d->slot);
    bs_ssz_u64(s, d->proposer_index);
    bm_str_append(s, d->parent_root.b, 32);
    bm_str_append(s, d->state_root.b, 32);
    bs_ssz_u32(s, 84); /* body */
    const uint32_t fixed = 396;
    body_common_ssz_fixed(s, d, fixed);
    bm_str_t var = BM_STR_INIT;
    if (d->fork == BS_FORK_GLOAS) {
        uint32_t bid_len = 100 + 224;
        bs_ssz_u32(s, fixed);           /* bls_to_execution_changes */
        bs_ssz_u32(s, fixed);           /* signed_execution_payload_bid */
        bs_ssz_u32(s, fixed + bid_len); /* payload_attestations */
        bs_ssz_u32(s, fixed + bid_len); /* parent_execution_requests */
        bid_ssz(s, d);
        requests_ssz(s);
    } else {
        payload_ssz(&var, d);
        uint32_t pl = (uint32_t)bm_str_len(&var);
        bs_ssz_u32(s, fixed);      /* execution_payload */
        bs_ssz_u32(s, fixed + pl); /* bls_to_execution_changes */
        bs_ssz_u32(s, fixed + pl); /* blob_kzg_commitments */
        bs_ssz_u32(s, fixed + pl); /* execution_requests */
        bm_str_append(s, bm_str_data(&var), pl);
        requests_ssz(s);
    }
    bm_str_dispose(&var);
}

void bs_envelope_json(bm_str_t *s, const bs_block_desc_t *d, const bs_root_t *block_root)
{
    bm_str_puts(s, "{\"payload\":");
    payload_json(s, d);
    bm_str_puts(s, ",\"execution_requests\":");
    requests_json(s);
    bm_str_puts(s, ",\"builder_index\":\"18446744073709551615\",\"beacon_block_root\":");
    bs_json_hex(s, block_root->b, 32);
    bm_str_puts(s, ",\"parent_beacon_block_root\":");
    bs_json_hex(s, d->parent_root.b, 32);
    bm_str_putc(s, '}');
}

void bs_envelope_ssz(bm_str_t *s, const bs_block_desc_t *d, const bs_root_t *block_root)
{
    bm_str_t pl = BM_STR_INIT;
    payload_ssz(&pl, d);
    uint32_t n = (uint32_t)bm_str_len(&pl);
    bs_ssz_u32(s, 80);
    bs_ssz_u32(s, 80 + n);
    bs_ssz_u64(s, UINT64_MAX);
    bm_str_append(s, block_root->b, 32);
    bm_str_append(s, d->parent_root.b, 32);
    bm_str_append(s, bm_str_data(&pl), n);
    requests_ssz(s);
    bm_str_dispose(&pl);
}

/* ---- attestations ------------------------------------------------------------------------ */

void bs_att_data_json(bm_str_t *s, const bs_att_data_t *d)
{
    bm_str_printf(s, "{\"slot\":\"%llu\",\"index\":\"%llu\",\"beacon_block_root\":",
                  (unsigned long long)d->slot, (unsigned long long)d->index);
    bs_json_hex(s, d->beacon_block_root.b, 32);
    bm_str_printf(s,
                  ",\"source\":{\"epoch\":\"%llu\",\"root\":", (unsigned long long)d->source.epoch);
    bs_json_hex(s, d->source.root.b, 32);
    bm_str_printf(
        s, "},\"target\":{\"epoch\":\"%llu\",\"root\":", (unsigned long long)d->target.epoch);
    bs_json_hex(s, d->target.root.b, 32);
    bm_str_puts(s, "}}");
}

void bs_att_data_ssz(bm_str_t *s, const bs_att_data_t *d)
{
    bs_ssz_u64(s, d->slot);
    bs_ssz_u64(s, d->index);
    bm_str_append(s, d->beacon_block_root.b, 32);
    bs_ssz_u64(s, d->source.epoch);
    bm_str_append(s, d->source.root.b, 32);
    bs_ssz_u64(s, d->target.epoch);
    bm_str_append(s, d->target.root.b, 32);
}

/* bitlist bytes with the delimiter bit after the last bit */
static size_t bitlist(const uint8_t *bits, uint32_t nbits, uint8_t *out)
{
    size_t nbytes = nbits / 8 + 1;
    memset(out, 0, nbytes);
    for (uint32_t i = 0; i < nbits; i++)
        if (bits[i / 8] >> (i % 8) & 1)
            out[i / 8] |= (uint8_t)(1u << (i % 8));
    out[nbits / 8] |= (uint8_t)(1u << (nbits % 8));
    return nbytes;
}

void bs_attestation_json(bm_str_t *s, const bs_att_data_t *d, const uint8_t *bits, uint32_t nbits,
                         const uint8_t sig[96])
{
    uint8_t bl[1024];
    if (nbits > 8 * 1000)
        nbits = 8 * 1000;
    size_t n = bitlist(bits, nbits, bl);
    bm_str_puts(s, "{\"aggregation_bits\":");
    bs_json_hex(s, bl, n);
    bm_str_puts(s, ",\"data\":");
    bs_att_data_json(s, d);
    bm_str_puts(s, ",\"signature\":");
    bs_json_hex(s, sig, 96);
    bm_str_puts(s, ",\"committee_bits\":\"0x0100000000000000\"}");
}

void bs_attestation_ssz(bm_str_t *s, const bs_att_data_t *d, const uint8_t *bits, uint32_t nbits,
                        const uint8_t sig[96])
{
    uint8_t bl[1024];
    if (nbits > 8 * 1000)
        nbits = 8 * 1000;
    size_t n = bitlist(bits, nbits, bl);
    bs_ssz_u32(s, 236);
    bs_att_data_ssz(s, d);
    bm_str_append(s, sig, 96);
    uint8_t cb[8] = {1};
    bm_str_append(s, cb, 8);
    bm_str_append(s, bl, n);
}

void bs_signed_block_ssz(bm_str_t *s, const bs_block_desc_t *d, const uint8_t sig[96])
{
    bs_ssz_u32(s, 100);
    bm_str_append(s, sig, 96);
    bs_block_ssz(s, d);
}

void bs_block_contents_ssz(bm_str_t *s, const bs_block_desc_t *d, const bs_root_t *env_root)
{
    bm_str_t blk = BM_STR_INIT, env = BM_STR_INIT;
    bs_block_ssz(&blk, d);
    uint32_t bl = (uint32_t)bm_str_len(&blk);
    if (env_root) {
        bs_envelope_ssz(&env, d, env_root);
        uint32_t el = (uint32_t)bm_str_len(&env);
        bs_ssz_u32(s, 16);
        bs_ssz_u32(s, 16 + bl);
        bs_ssz_u32(s, 16 + bl + el); /* kzg_proofs: empty */
        bs_ssz_u32(s, 16 + bl + el); /* blobs: empty */
        bm_str_append(s, bm_str_data(&blk), bl);
        bm_str_append(s, bm_str_data(&env), el);
    } else {
        bs_ssz_u32(s, 12);
        bs_ssz_u32(s, 12 + bl); /* kzg_proofs: empty */
        bs_ssz_u32(s, 12 + bl); /* blobs: empty */
        bm_str_append(s, bm_str_data(&blk), bl);
    }
    bm_str_dispose(&blk);
    bm_str_dispose(&env);
}

void bs_payload_att_data_ssz(bm_str_t *s, const bs_root_t *root, uint64_t slot, bool present,
                             bool blobs)
{
    bm_str_append(s, root->b, 32);
    bs_ssz_u64(s, slot);
    bm_str_putc(s, present ? 1 : 0);
    bm_str_putc(s, blobs ? 1 : 0);
}
